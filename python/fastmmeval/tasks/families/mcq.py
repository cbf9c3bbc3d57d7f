"""Multiple-choice benchmarks."""
