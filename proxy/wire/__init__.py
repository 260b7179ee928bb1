"""Converters at the edge: each API's request to the neutral (OpenAI chat) form and back."""
