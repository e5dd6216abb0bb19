"""`python -m batch_pipeline doctor`: is this SAN database ready for batch_pipeline?

Checks the connection, every table and column the pipeline needs, the recommended indexes,
the clock skew between this server and the database, the dispatcher and the time zone. Prints
what is wrong and how to fix it; ready (exit 0) only when nothing is.
"""

import os
from collections.abc import Callable
from dataclasses import dataclass


from sqlalchemy.exc import SQLAlchemyError

from batch_pipeline.san.database import (
    SanConnectionError, check_connection, create_san_engine, database_now, read_transaction, redacted, utc_now,
)
from batch_pipeline.san.dispatch import DispatcherConfigError, RedisStreamDispatcher, build_dispatcher, redact_secrets
from batch_pipeline.san.schema import SanSchemaError, index_advice, verify_schema
from batch_pipeline.san.timezone import TimezoneConfigError, san_timezone_name

# The pipeline measures ages with the database's clock; a host this far off is still worth
# knowing about (its logs and Dagster's own timestamps disagree with SAN's).
MAX_CLOCK_SKEW_SECONDS = 30


@dataclass
class Finding:
    ok: bool
    what: str
    fix: str = ""
    warning: bool = False  # worth fixing, but the pipeline is ready without it


def diagnose(database_url: str) -> list[Finding]:
    findings: list[Finding] = []
    try:
        findings.append(Finding(True, f"time zone {san_timezone_name()}"))
    except TimezoneConfigError as error:
        findings.append(Finding(False, str(error), "set SAN_TIMEZONE to an IANA zone such as Asia/Seoul"))
    try:
        engine = create_san_engine(database_url)
        check_connection(engine)
    except SanConnectionError as error:
        findings.append(Finding(False, str(error), "check SAN_DATABASE_URL, the server and the credentials"))
        return findings
    findings.append(Finding(True, f"connected to {redacted(engine.url)}"))
    try:
        diagnose_connected(engine, findings)
    except SQLAlchemyError as error:  # bounded waits: a locked table is reported, not waited on
        reason = (str(getattr(error, "orig", None) or error).strip().splitlines() or [""])[0]
        findings.append(Finding(False, f"the SAN database did not answer in time: {reason}",
                                "a table is locked (a migration?) or the server is overloaded: look at pg_locks / "
                                "pg_stat_activity, then run doctor again"))
    engine.dispose()
    return findings


def diagnose_connected(engine, findings: list[Finding]) -> None:
    with read_transaction(engine) as conn:
        try:
            verify_schema(conn)
            findings.append(Finding(True, "every table and column batch_pipeline uses is present"))
        except SanSchemaError as error:
            findings.append(Finding(False, str(error), "point SAN_DATABASE_URL at the SAN database"))
            return
        advice = index_advice(conn)
        if advice.missing:
            small_demo = conn.dialect.name != "postgresql"  # the embedded SQLite demo is fine without
            findings.append(Finding(
                small_demo,
                "missing recommended indexes: " + ", ".join(ix.name for ix in advice.missing),
                "run `python -m batch_pipeline create-indexes`, or:\n      " + ";\n      ".join(advice.create_with) + ";",
                warning=small_demo,
            ))
        else:
            findings.append(Finding(True, "recommended indexes present"))
        if advice.superseded:
            findings.append(Finding(
                True,
                "superseded indexes (replaced by newer recommended ones; they only cost the app's writes): "
                + ", ".join(advice.superseded),
                "run `python -m batch_pipeline create-indexes` (it drops them once their replacements exist), or:\n      "
                + ";\n      ".join(advice.drop_with) + ";",
                warning=True,
            ))
        skew = (database_now(conn) - utc_now()).total_seconds()
        findings.append(Finding(
            abs(skew) <= MAX_CLOCK_SKEW_SECONDS,
            f"clock skew database - this server: {skew:+.1f} s",
            "" if abs(skew) <= MAX_CLOCK_SKEW_SECONDS else "synchronise both clocks (NTP): thresholds are measured in minutes",
        ))
        redis_url = os.environ.get("SAN_REDIS_URL", "redis://127.0.0.1:6379/0")
        try:
            dispatcher = build_dispatcher(os.environ.get("SAN_JOB_DISPATCHER"), conn.dialect.name, redis_url)
            if isinstance(dispatcher, RedisStreamDispatcher):
                dispatcher.ping()
            findings.append(Finding(True, f"dispatcher {dispatcher.kind}"))
        except DispatcherConfigError as error:
            findings.append(Finding(False, str(error), "set SAN_JOB_DISPATCHER to pg_notify, redis_stream or none"))
        except Exception as error:  # Redis unreachable
            findings.append(Finding(False, f"Redis at {redacted(redis_url)} is unreachable: "
                                           f"{redact_secrets(str(error), redis_url)}",
                                    "start Redis or fix SAN_REDIS_URL (jobs are still created, only not announced)"))


def run_doctor(database_url: str, out: Callable[[str], None] = print) -> int:
    findings = diagnose(database_url)
    for finding in findings:
        out(f"{'BAD' if not finding.ok else 'warn' if finding.warning else 'ok '}  {finding.what}")
        if finding.fix:
            out(f"     fix: {finding.fix}")
    ready = all(f.ok for f in findings)
    out("ready" if ready else "not ready")
    return 0 if ready else 1
