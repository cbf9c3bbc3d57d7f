"""An OpenAI-compatible HTTP server over fastmmeval models, and test tooling for HTTP clients."""
