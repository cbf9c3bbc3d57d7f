"""Lite task sets: embed docs, pick a representative subset, export it and validate model rankings on it."""
