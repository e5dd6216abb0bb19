"""The TIL job's run config: the shared write settings (batch size, timeouts, dry run)."""

from batch_pipeline.san.config import WriteConfig


class TilConfig(WriteConfig):
    """Settings for one TIL partition run (the Launchpad: ops.run_til_auto_generation.config)."""
