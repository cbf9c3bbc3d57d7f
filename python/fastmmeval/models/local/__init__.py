"""Backends that run a model in this process (`hf`, `vllm`) and the transformers adapters under them."""
