"""An OpenAI-compatible HTTP server over fastmmeval models."""
