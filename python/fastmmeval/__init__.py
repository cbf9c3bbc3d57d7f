"""fastmmeval: fast, trustworthy evaluation of large multimodal models."""

__version__ = "0.1.0"
