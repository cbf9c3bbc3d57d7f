"""The `socratic` backend: images described in words (ImageNet tags and OCR) for a text-only LM."""
