"""Seen from outside: the metrics endpoint (`python -m batch_pipeline metrics`) that SAN's
Prometheus scrapes. It reads SAN's database (san_readings.py) and Dagster's instance
(dagster_readings.py), caches both for a few seconds, and never writes to either."""
