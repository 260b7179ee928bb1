"""Pure converters, no I/O: OpenAI chat (the neutral form), Anthropic, Responses, streams."""
