"""Backends that answer requests through a remote API (`openai`, `anthropic`) and what they share."""
