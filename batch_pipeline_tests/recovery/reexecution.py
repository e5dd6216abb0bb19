"""recovery_job as Dagster re-executes it: a reconstructable job (re-execution from failure runs
a new run of the same job, loading the steps that succeeded from the parent's storage), whose
dispatcher dies inside write batch BP_DIES_IN_BATCH (unset: never) and whose SAN database is
SAN_DATABASE_URL."""

import os

from dagster import Definitions

from batch_pipeline.recovery import definitions as recovery
from batch_pipeline.san.resources import JobDispatcherResource, san_resources
from batch_pipeline_tests.conftest import DiesOnBatch

DIES_IN_BATCH = "BP_DIES_IN_BATCH"


class DiesInBatch(JobDispatcherResource):
    """The run's process dies inside its `batch`-th write batch of the first area: the error is
    no database fault, so the step is not retried."""

    batch: int

    def for_database(self, engine):
        return DiesOnBatch(self.batch)


class DiesInTheBatchTheEnvironmentNames(JobDispatcherResource):
    """DiesInBatch(BP_DIES_IN_BATCH) as each run's write batches begin, else announces nothing
    (the job's definition is built once per process; the environment is read per run)."""

    kind: str = "none"

    def for_database(self, engine):
        batch = int(os.environ.get(DIES_IN_BATCH) or 0)
        return DiesOnBatch(batch) if batch else super().for_database(engine)


def recovery_job_dying_in_a_batch():
    resources = {**san_resources(), "job_dispatcher": DiesInTheBatchTheEnvironmentNames()}
    return Definitions.merge(recovery.defs(), Definitions(resources=resources)).resolve_job_def(
        "recovery_job"
    )
