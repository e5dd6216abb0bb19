"""Keeping the Dagster instance itself healthy: run retention."""
