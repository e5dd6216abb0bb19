"""batch_pipeline: the self-healing batch layer of SAN, as a Dagster code location."""
