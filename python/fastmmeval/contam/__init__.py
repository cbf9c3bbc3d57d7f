"""Contamination audits: n-gram hashing and (later) out-of-core indexes."""
