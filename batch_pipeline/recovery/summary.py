"""What a recovery run healed, told first: the sentence and the table a materialization opens
with, and the run's `Healed` tag, which the run list shows ("19 ghost jobs, 8 orphan scraps").

The UI lists metadata in the order given: the sentence, then the healed ids as a table, then the
counts (the Plots tab follows that order too: what was healed first, the rarely non-zero
last), then the JSON lists that explain, the metrics and the checks read.
"""

import re
import statistics
from datetime import timedelta

from dagster import MetadataValue, TableColumn, TableRecord, TableSchema

from batch_pipeline.recovery.plan import Recovery, RecoveryReport
from batch_pipeline.recovery.targets import TargetRecovery
from batch_pipeline.san.durations import in_words

# The run tag that sums up a recovery run in the run list. Capitalised: the UI lists a run's
# tags in key order, and "H" sorts before every lower-case key (batch_pipeline/wrote.*).
HEALED_TAG = "Healed"
NOTHING_HEALED = "nothing"
HEALING = "(in progress)"  # until the first area has healed
DRY_RUN = "nothing (dry run)"
# Rows of the healed table; every id stays in `recovered` (up to the audit's own limit).
TABLE_ROWS = 200
# Counts in the order the UI shows and plots them.
COUNT_ORDER = (
    "enqueued",
    "detected",
    "exhausted",
    "heal_age_median_seconds",
    "heal_age_max_seconds",
    "skipped_by_race",
    "deferred",
    "announce_failures",
)
CLOCK = "by SAN's database clock"


def waited(report: RecoveryReport) -> str:
    """How long what it healed had waited, in words."""
    ages = report.heal_ages_seconds
    if not ages:
        return ""
    median, longest = statistics.median(ages), max(ages)
    return f" They had waited {duration(median)} (median), up to {duration(longest)} ({CLOCK})."


def duration(seconds: float) -> str:
    """`seconds` rounded to what a reader needs: 1 h 50 min, 12 min, 40 s."""
    whole = int(round(seconds))
    if whole >= 3_600:
        hours, rest = divmod(whole, 3_600)
        return f"{hours} h {rest // 60} min" if rest >= 60 else f"{hours} h"
    if whole >= 60:
        return f"{whole // 60} min"
    return f"{whole} s"


def healed_sentence(recovery: Recovery, report: RecoveryReport) -> str:
    """One sentence: what was healed, by which rule, and what was left and why."""
    noun = recovery.noun
    if report.dry_run:
        head = f"Dry run, nothing written: would heal {report.detected} {noun}"
    elif report.enqueued:
        head = f"Healed {counted(report.enqueued, noun)}"
    else:
        head = f"Nothing healed: no {noun} to enqueue"
    left = [
        f"{report.exhausted} exhausted (at max_attempts: no new job; see redrive)"
        if report.exhausted
        else "",
        f"{report.deferred} deferred to the next run (max_enqueue_per_run)"
        if report.deferred
        else "",
        f"{report.skipped_by_race} skipped: a worker changed them first"
        if report.skipped_by_race
        else "",
    ]
    left_text = "; ".join(part for part in left if part)
    return (
        f"{head} ({recovery.rule_text})."
        + (f" {left_text[0].upper()}{left_text[1:]}." if left_text else "")
        + waited(report)
    )


def rule_matched(recovery: Recovery, report: RecoveryReport, entry: dict) -> str:
    """The rule a healed row matched: a ghost's stale status and its threshold, or the target
    recovery's condition."""
    status = entry.get("stale_status")
    if status is None:
        return f"{recovery.needs_work_text}, no active job"
    minutes = report.thresholds.get(f"stale_{status.lower()}_after_minutes")
    return f"stale in {status}" + (
        f" > {in_words(timedelta(minutes=minutes))}" if minutes is not None else ""
    )


def healed_table(recovery: Recovery, report: RecoveryReport) -> MetadataValue:
    """The healed rows as a table the UI renders: ids, old -> new job, the rule that matched."""
    columns = (
        [
            TableColumn(recovery.id_key, "int"),
            TableColumn("new_job_id", "int", f"the {recovery.job_type} job it got"),
        ]
        if isinstance(recovery, TargetRecovery)
        else [
            TableColumn("failed_job_id", "int", "the stale job, closed as FAILED"),
            TableColumn("new_job_id", "int", "its replacement (empty: exhausted)"),
            TableColumn("job_type", "string"),
            TableColumn("target_id", "int"),
        ]
    ) + [TableColumn("rule", "string", "the rule it matched")]
    names = [column.name for column in columns]
    records = [
        TableRecord(
            {
                **{name: entry.get(name) for name in names if name != "rule"},
                "rule": rule_matched(recovery, report, entry),
            }
        )
        for entry in report.recovered[:TABLE_ROWS]
    ]
    return MetadataValue.table(records, TableSchema(columns))


def audit_metadata(recovery: Recovery, report: RecoveryReport) -> dict:
    """The report's metadata, in the order a reader wants it: the sentence, the table, the counts,
    then the rest as the report gives it."""
    values = report.metadata()
    shown = len(report.recovered[:TABLE_ROWS])
    ordered = {
        "summary": MetadataValue.text(healed_sentence(recovery, report)),
        **(
            {
                f"healed (first {shown} of {len(report.recovered)})"
                if len(report.recovered) > shown
                else "healed": healed_table(recovery, report)
            }
            if report.recovered
            else {}
        ),
        **{key: values[key] for key in COUNT_ORDER if key in values},
    }
    return {**ordered, **{key: v for key, v in values.items() if key not in ordered}}


def run_summary(earlier: str | None, recovery_nouns: list[str], noun: str, healed: int) -> str:
    """The `Healed` tag's new value: `earlier` (this run's tag so far) with `noun`'s count set,
    areas in the registry's order, only those that healed something."""
    counts: dict[str, int] = {}
    for count, found in re.findall(r"(?:^|, )(\d+) ([^,]+)", earlier or ""):
        for each in recovery_nouns:
            if found in (each, singular(each)):
                counts[each] = int(count)
    counts[noun] = healed
    listed = [counted(counts[n], n) for n in recovery_nouns if counts.get(n)]
    return ", ".join(listed) or NOTHING_HEALED


def singular(noun: str) -> str:
    return noun.removesuffix("s")


def counted(count: int, noun: str) -> str:
    """ "1 ghost job", "2 ghost jobs"."""
    return f"{count} {singular(noun) if count == 1 else noun}"
