"""`python -m batch_pipeline explain KIND ID` and `python -m batch_pipeline redrive ...`: the
support commands (batch_pipeline/__main__.py parses the arguments).

Exit codes: 0 done; 2 bad input (an unknown id, no SAN tables, a bad filter, nothing
matching); 3 no Dagster instance (explain: the story was printed from SAN's database alone;
redrive --apply: nothing was written); 1 a redrive run failed (its message says why).
"""

import getpass
import json
import os
import socket
import sys
from pathlib import Path

from dagster import DagsterInstance, Definitions
from pydantic import ValidationError

from batch_pipeline.alerts.slack import run_link
from batch_pipeline.san.database import (
    SanConnectionError,
    check_connection,
    create_san_engine,
    embedded_database_url,
    read_transaction,
)
from batch_pipeline.san.errors import root_line
from batch_pipeline.san.resources import SanDatabase, san_resources
from batch_pipeline.san.schema import SanSchemaError, verify_schema
from batch_pipeline.support.assets import ASKED_BY_TAG, matching_targets, redrive_asset
from batch_pipeline.support.config import RedriveConfig
from batch_pipeline.support.explain import as_json, as_text, explain
from batch_pipeline.support.jobs import redrive_job
from batch_pipeline.support.redrive import RedriveFilter, nothing_matches
from batch_pipeline.support.story import NotFound
from batch_pipeline.support.touches import BY_AREA, REDRIVE_ASSET

BAD_INPUT = 2
NO_INSTANCE = 3
# Where `make run` keeps its instance (the Makefile's RUN_HOME): explain and redrive started from
# the checkout read its runs without DAGSTER_HOME.
CHECKOUT_DAGSTER_HOME = Path(__file__).resolve().parents[2] / ".dagster_home"
# Said under a story of the embedded default, whose times `make run`'s sandbox moves.
SANDBOX_CLOCK = (
    "note: this is the embedded default, `make run`'s sandbox: while it lives its rows age by "
    "hours of SAN time per real minute, so the times above move between two calls"
)


def error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)


def open_instance() -> tuple[DagsterInstance | None, str | None]:
    """The instance at DAGSTER_HOME (the one the UI and the daemon use), else `make run`'s in
    this checkout, or why there is none."""
    home = os.environ.get("DAGSTER_HOME")
    if not home and (CHECKOUT_DAGSTER_HOME / "dagster.yaml").exists():
        home = os.environ["DAGSTER_HOME"] = str(CHECKOUT_DAGSTER_HOME)
        print(f"reading the runs of `make run`'s instance at {home}", file=sys.stderr)
    if not home:
        return None, (
            "DAGSTER_HOME is not set and `make run` has no instance in this checkout (point "
            "DAGSTER_HOME at the instance the UI uses)"
        )
    try:
        return DagsterInstance.get(), None
    except Exception as failure:  # a missing directory, a bad dagster.yaml, storage down
        first_line = root_line(failure)
        return None, f"the Dagster instance at DAGSTER_HOME={home} cannot be opened: {first_line}"


def _san_engine(url: str):
    engine = create_san_engine(url)
    check_connection(engine)
    with read_transaction(engine) as conn:
        verify_schema(conn)
    return engine


def explain_command(database_url: str, kind: str, target_id: int, as_machine: bool) -> int:
    try:
        engine = _san_engine(database_url)
        instance, problem = open_instance()
        explanation = explain(engine, instance, kind, target_id, instance_problem=problem)
    except (SanConnectionError, SanSchemaError, NotFound) as failure:
        error(str(failure))
        return BAD_INPUT
    print(as_json(explanation) if as_machine else as_text(explanation))
    if not as_machine and database_url == embedded_database_url():
        print(SANDBOX_CLOCK)
    if explanation.dagster_problem:
        error(f"{explanation.dagster_problem}; the story above is from SAN's database only")
        return NO_INSTANCE
    return 0


def redrive_command(database_url: str, options: dict, apply: bool, as_machine: bool) -> int:
    config = {**{k: v for k, v in options.items() if v not in (None, [], "")}, "dry_run": not apply}
    try:
        checked = RedriveConfig(**config)
    except ValidationError as invalid:
        first = invalid.errors()[0]
        error(f"{'.'.join(map(str, first['loc']))}: {first['msg']}")
        return BAD_INPUT
    try:
        engine = _san_engine(database_url)
        _now, matched = matching_targets(engine, checked)
        engine.dispose()
    except (SanConnectionError, SanSchemaError) as failure:
        error(str(failure))
        return BAD_INPUT
    if matched.empty:  # said before a run is made for it
        recovery = BY_AREA[checked.area.value]
        error(nothing_matches(recovery, checked.chosen, checked.max_attempts))
        return BAD_INPUT
    instance, problem = open_instance()
    if instance is None:
        if apply:
            error(f"a redrive is recorded in the Dagster instance, and there is none: {problem}")
            return NO_INSTANCE
        instance = DagsterInstance.ephemeral()  # a dry run leaves nothing to keep
    result = run_redrive_job(database_url, config, instance)
    if not result.success:
        error(f"redrive run {result.run_id} failed: {first_failure(result)}")
        return 1
    metadata = audited_metadata(result)
    if as_machine:
        print(json.dumps({**metadata, "run_id": result.run_id}, indent=2, default=str))
    else:
        print_redrive(metadata, apply, result.run_id)
    return 0


def run_redrive_job(database_url: str, config: dict, instance: DagsterInstance):
    definitions = Definitions(
        assets=[redrive_asset],
        jobs=[redrive_job],
        resources={**san_resources(), "san_database": SanDatabase(url=database_url)},
    )
    return definitions.resolve_job_def(redrive_job.name).execute_in_process(
        # the run's own log is in the instance (the UI); the shell gets the summary below
        run_config={
            "ops": {REDRIVE_ASSET: {"config": config}},
            "loggers": {"console": {"config": {"log_level": "CRITICAL"}}},
        },
        instance=instance,
        tags={ASKED_BY_TAG: f"cli {getpass.getuser()}@{socket.gethostname()}"},
        raise_on_error=False,
    )


def first_failure(result) -> str:
    failures = result.get_step_failure_events()
    if failures and failures[0].step_failure_data.error:
        return failures[0].step_failure_data.error.message.strip().splitlines()[0]
    return "the redrive run failed"


def audited_metadata(result) -> dict:
    """The metadata of the run's audit: its materialization, or a dry run's observation."""
    events = [
        *result.get_asset_materialization_events(),
        *result.get_asset_observation_events(),
    ]
    audited = events[-1].event_specific_data
    audited = getattr(audited, "materialization", None) or audited.asset_observation
    return {key: value.value for key, value in audited.metadata.items()}


def print_redrive(metadata: dict, apply: bool, run_id: str) -> None:
    pairs = metadata["redriven"] if apply else metadata["would_redrive"]
    verb = "redriven" if apply else "would redrive (dry run: add --apply)"
    chosen = (
        "" if metadata["filter"] == RedriveFilter().words() else f" matching {metadata['filter']}"
    )
    print(
        f"{metadata['area']}: {metadata['matched']} exhausted targets{chosen}; "
        f"{verb}: {len(pairs)}"
        + (f"; {metadata['over_limit']} over the limit" if metadata["over_limit"] else "")
        + (
            f"; {metadata['skipped_by_race']} skipped by race"
            if metadata["skipped_by_race"]
            else ""
        )
    )
    for pair in pairs:
        new = f" -> new job {pair['new_job_id']}" if pair["new_job_id"] else ""
        print(
            f"  target {pair['target_id']}: {pair['attempts_before']} jobs, last "
            f"{pair['last_job_id']}: {pair['last_error'][:80]}{new}"
        )
    if apply:  # a dry run's run is in an ephemeral instance: nothing to look at
        print(f"run {run_id}: {run_link(run_id)}")
