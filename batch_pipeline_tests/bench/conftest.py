"""The experiments run on scratch sandbox databases: the sandbox suite's fixtures."""

from batch_pipeline_tests.sandbox.conftest import pg_scratch_url, pg_server_url

__all__ = ["pg_scratch_url", "pg_server_url"]
