"""The batch_pipeline code location: `from batch_pipeline.definitions import defs`.

One Definitions per domain folder (each folder's definitions.py, as dagster-open-platform lays
its domains out), merged, with the SAN resources every job and sensor shares. A new job, sensor
or schedule is a line in its own domain's definitions.py, never here; see docs/layout.md.
"""

from dagster import Definitions

from batch_pipeline.alerts import definitions as alerts
from batch_pipeline.fast_lane import definitions as fast_lane
from batch_pipeline.operations import definitions as operations
from batch_pipeline.recovery import definitions as recovery
from batch_pipeline.san.resources import san_resources
from batch_pipeline.support import definitions as support
from batch_pipeline.til import definitions as til

DOMAINS = (recovery, fast_lane, til, support, operations, alerts)


def build_definitions() -> Definitions:
    """The code location, from the environment as it is now (tests change it and build again)."""
    return Definitions.merge(
        *(domain.defs() for domain in DOMAINS), Definitions(resources=san_resources())
    )


defs = build_definitions()
