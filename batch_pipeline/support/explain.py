"""`explain`: one target's story, from SAN's database (story.py) and the Dagster instance (the
audit trail, through audit_index.py), as text for a shell, Markdown for the UI, JSON for
machines. It only reads.
"""

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime

from dagster import AssetKey, AssetRecordsFilter, DagsterInstance
from sqlalchemy.engine import Engine

from batch_pipeline.alerts.slack import base_url as ui_base_url
from batch_pipeline.operations.run_retention import run_retention_days
from batch_pipeline.san.database import database_now, read_transaction
from batch_pipeline.san.errors import root_line
from batch_pipeline.support.audit_index import AuditRead, retention_horizon, touches_for
from batch_pipeline.support.story import Rules, TargetStory, read_story
from batch_pipeline.support.touches import JOB, Touch
from batch_pipeline.support.wording import shorten
from batch_pipeline.til.auto_generation import AREA as TIL_AREA

CREATED_BY_TIL = "created by the daily TIL"


@dataclass
class Explanation:
    story: TargetStory
    touches: list[Touch] = field(default_factory=list)
    audit: AuditRead | None = None
    # None: the runs were read; else why they could not be (the story from SAN still holds)
    dagster_problem: str | None = None
    base_url: str = ""

    @property
    def complete(self) -> bool:
        return self.dagster_problem is None


def til_touch(instance: DagsterInstance, story: TargetStory) -> list[Touch]:
    """The daily TIL run that created a summary: its day's materialization whose
    summaries_created_at is the summary's created_at (every summary of a run carries it)."""
    day = story.facts.get("target_date")
    if story.kind != "summary" or not day:
        return []
    records = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey(TIL_AREA), asset_partitions=[day]), limit=100
    ).records
    for record in records:
        metadata = record.asset_materialization.metadata
        stamp = metadata.get("summaries_created_at")
        if stamp is not None and datetime.fromisoformat(stamp.value) == story.created_at:
            return [
                Touch(
                    kind="summary",
                    target_id=story.id,
                    action=CREATED_BY_TIL,
                    asset=TIL_AREA,
                    storage_id=record.storage_id,
                    at=record.timestamp,
                    run_id=record.run_id or "",
                    note=f"partition {day}",
                )
            ]
    return []


def explain(
    engine: Engine,
    instance: DagsterInstance | None,
    kind: str,
    target_id: int,
    *,
    rules: Rules | None = None,
    instance_problem: str | None = None,
) -> Explanation:
    """The story of `kind` `target_id`; raises story.NotFound for an unknown kind or id. Without
    an instance (or if reading it fails) the explanation says so in `dagster_problem`."""
    with read_transaction(engine) as conn:
        now = database_now(conn)
        story = read_story(conn, kind, target_id, now, rules or Rules())
    explanation = Explanation(story=story, base_url=ui_base_url())
    if instance is None:
        explanation.dagster_problem = instance_problem or "no Dagster instance given"
        return explanation
    keys = [(story.kind, story.id), *((JOB, job.id) for job in story.jobs)]
    try:
        audit = touches_for(instance, keys, retention_horizon(now, run_retention_days()))
        explanation.touches = sorted(
            [*til_touch(instance, story), *audit.touches],
            key=lambda t: (t.first_at or t.at, t.storage_id),
        )
        explanation.audit = audit
    except Exception as error:  # the instance's storage is unreachable: SAN's story still holds
        first_line = root_line(error)
        explanation.dagster_problem = f"the Dagster instance could not be read: {first_line}"
    return explanation


# -- rendering ----------------------------------------------------------------------------------
def _at(value: datetime | float | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, float | int):
        value = datetime.fromtimestamp(value, UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _later(value: datetime | None, since: datetime) -> str:
    """A time after `since`: the clock alone on the same day."""
    if value is None or value.astimezone(UTC).date() != since.astimezone(UTC).date():
        return _at(value)
    return value.astimezone(UTC).strftime("%H:%M:%S")


def run_link(explanation: Explanation, touch: Touch) -> str:
    if touch.run_id:
        return f"{explanation.base_url}/runs/{touch.run_id}"
    return f"{explanation.base_url}/assets/{touch.asset}"  # a sensor's own event: no run


def _fact_words(story: TargetStory) -> list[str]:
    words = []
    for name, value in story.facts.items():
        if isinstance(value, bool):
            words.append(f"{name.replace('_', ' ')}: {'yes' if value else 'no'}")
        elif name == "knowledge_card":
            words.append(f"knowledge card: {value if value is not None else 'none'}")
        else:
            words.append(f"{name.replace('_', ' ')}: {value if value is not None else '-'}")
    return words


def touch_words(touch: Touch) -> str:
    what = touch.action
    if touch.job_id is not None and touch.kind != JOB or (touch.kind == JOB and touch.job_id):
        what += f" job {touch.job_id}"
    if touch.new_job_id is not None:
        what += f" -> new job {touch.new_job_id}"
    if touch.times > 1:
        what += f" ({touch.times} runs in a row, from {_at(touch.first_at)})"
    if touch.note:
        what += f"; {touch.note}"
    if touch.committed_by_failed_attempt:
        what += " (committed by an attempt that failed afterwards)"
    return what


def _audit_notes(explanation: Explanation) -> list[str]:
    if explanation.dagster_problem:
        return [f"runs that touched it: unknown ({explanation.dagster_problem})"]
    audit = explanation.audit
    notes = []
    if audit is not None and not audit.indexed:
        notes.append(
            "the audit index is empty (audit_index_sensor has not run): only the newest "
            "events were read"
        )
    if audit is not None and audit.behind:
        notes.append(
            "the audit index is behind (is audit_index_sensor running?): newer runs may be missing"
        )
    return notes


def as_text(explanation: Explanation) -> str:
    story = explanation.story
    lines = [
        f"{story.kind} {story.id} of user {story.user_id}, created {_at(story.created_at)} UTC"
        + (f" (asked about job {story.asked_about_job})" if story.asked_about_job else ""),
        "  " + "; ".join(_fact_words(story)),
        "",
        "jobs, oldest first:" if story.jobs else "jobs: none",
    ]
    for job in story.jobs:
        lines.append(
            f"  {job.id:>8}  {job.job_type:<15} {job.status:<10} created {_at(job.created_at)}"
            f", started {_later(job.started_at, job.created_at)}"
            f", finished {_later(job.finished_at, job.created_at)}"
            + (f", retry of {job.retry_of_job_id}" if job.retry_of_job_id else "")
            + (f"\n            error: {shorten(job.error_message)}" if job.error_message else "")
        )
    lines += ["", f"verdict now ({_at(story.now)} UTC):"]
    for verdict in story.verdicts:
        lines.append(f"  {verdict.job_type} ({verdict.area}): {verdict.says}")
    lines += ["", "Dagster runs that touched it, oldest first:"]
    if explanation.complete and not explanation.touches:
        lines.append("  none")
    for touch in explanation.touches:
        lines.append(
            f"  {_at(touch.at if touch.times == 1 else touch.first_at)}  {touch.asset}: "
            f"{touch_words(touch)}\n      {run_link(explanation, touch)}"
        )
    lines += [f"  note: {note}" for note in _audit_notes(explanation)]
    return "\n".join(lines)


def as_markdown(explanation: Explanation) -> str:
    story = explanation.story
    lines = [
        f"### {story.kind} {story.id} (user {story.user_id})",
        "",
        f"Created {_at(story.created_at)} UTC; " + "; ".join(_fact_words(story)) + ".",
        "",
        "**Verdict now** (" + _at(story.now) + " UTC)",
        "",
        *(f"- **{v.job_type}** ({v.area}): {v.says}" for v in story.verdicts),
        "",
        "**Jobs**, oldest first",
        "",
        "| id | type | status | created | started | finished | retry of | error |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| {j.id} | {j.job_type} | {j.status} | {_at(j.created_at)} | {_at(j.started_at)} | "
            f"{_at(j.finished_at)} | {j.retry_of_job_id or ''} | "
            f"{shorten(j.error_message, 80).replace('|', '/')} |"
            for j in story.jobs
        ),
        "",
        "**Dagster runs that touched it**",
        "",
    ]
    if explanation.touches:
        lines += ["| when (UTC) | asset | what | run |", "|---|---|---|---|"]
        for touch in explanation.touches:
            label = touch.run_id[:8] if touch.run_id else "sensor tick"
            lines.append(
                f"| {_at(touch.at if touch.times == 1 else touch.first_at)} | {touch.asset} | "
                f"{touch_words(touch)} | [{label}]({run_link(explanation, touch)}) |"
            )
    elif explanation.complete:
        lines.append("None.")
    lines += [f"\n_{note}_" for note in _audit_notes(explanation)]
    return "\n".join(lines)


def _plain(value):
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    return value


def as_json(explanation: Explanation) -> str:
    story = asdict(explanation.story)
    return json.dumps(
        {
            "target": {key: story[key] for key in ("kind", "id", "user_id", "created_at")}
            | {"facts": story["facts"], "asked_about_job": story["asked_about_job"]},
            "now": story["now"],
            "jobs": story["jobs"],
            "verdicts": story["verdicts"],
            "runs": [
                {**touch.to_json(), "link": run_link(explanation, touch)}
                for touch in explanation.touches
            ],
            "dagster_problem": explanation.dagster_problem,
            "notes": _audit_notes(explanation),
        },
        default=_plain,
        indent=2,
    )
