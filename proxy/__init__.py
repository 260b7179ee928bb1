"""ctxproxy: an OpenAI-compatible proxy that compresses an agent's chat context in transit."""

__version__ = "0.1.0"
