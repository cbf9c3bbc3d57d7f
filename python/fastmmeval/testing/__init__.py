"""Helpers for tests and benches, never imported by the rest of the package: tiny random-weight
models (`random_init`) and a fault-injecting HTTP proxy (`faults`)."""
