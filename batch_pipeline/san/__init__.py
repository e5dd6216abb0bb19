"""What every batch_pipeline service shares: the SAN tables, the database resource, the one
enqueue path and the dispatchers that announce new jobs to SAN's workers."""
