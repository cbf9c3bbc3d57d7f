"""Tasks: YAML protocols, dataset sources, prompt templates."""
