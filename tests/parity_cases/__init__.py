"""Parity fixtures, one module per benchmark family, each with a module-level `CASES` list."""
