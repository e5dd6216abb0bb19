"""Benchmark of batch_pipeline against a hand-written raw-SQL baseline (see docs/benchmarks.md)."""
