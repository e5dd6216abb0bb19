"""`python -m batch_pipeline doctor`: is this SAN database ready for batch_pipeline?

Checks the connection, every table and column the pipeline needs, the role's privileges and
session settings, the recommended indexes, the app-side guarantee, the clock skew between this
server and the database, the dispatcher and the time zone. Prints what is wrong and how to fix
it (a check that cannot complete is a finding too, never a traceback); ready (exit 0) when
nothing but warnings is.
"""

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from batch_pipeline.san.database import (
    SanConnectionError,
    check_connection,
    create_san_engine,
    database_now,
    read_transaction,
    redacted,
    utc_now,
)
from batch_pipeline.san.dialects import dialect
from batch_pipeline.san.dispatch import (
    DEFAULT_REDIS_URL,
    PG_NOTIFY_CHANNEL,
    REDIS_STREAM,
    SAN_JOB_DISPATCHER,
    SAN_NOTIFY_CHANNEL,
    SAN_REDIS_STREAM,
    SAN_REDIS_URL,
    DispatcherConfigError,
    RedisStreamDispatcher,
    build_dispatcher,
    redact_secrets,
)
from batch_pipeline.san.errors import first_line
from batch_pipeline.san.schema import (
    SanSchemaError,
    app_guarantee_index,
    app_guarantee_statement,
    conflict_message,
    index_advice,
    targets_with_two_active_jobs,
    verify_schema,
)
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


# What the driver says -> the fix to print (the first that matches).
CONNECTION_FIXES = (
    (
        "not a valid SQLAlchemy URL",
        "write SAN_DATABASE_URL as postgresql+psycopg://user:password@host:5432/dbname",
    ),
    (
        "names the '",
        "batch_pipeline runs on PostgreSQL (or the SQLite demo): point SAN_DATABASE_URL at SAN's "
        "PostgreSQL",
    ),
    (
        "password authentication failed",
        "fix the user or password in SAN_DATABASE_URL (or the server's pg_hba.conf)",
    ),
    ("no password supplied", "add the password to SAN_DATABASE_URL (user:password@host)"),
    (
        "does not exist",
        "fix the database name at the end of SAN_DATABASE_URL (or the role name, if that is the "
        "one missing)",
    ),
    ("could not translate host name", "fix the host in SAN_DATABASE_URL: it does not resolve"),
    ("Name or service not known", "fix the host in SAN_DATABASE_URL: it does not resolve"),
    (
        "Connection refused",
        "start the server, or fix the host and port in SAN_DATABASE_URL: nothing listens there",
    ),
    (
        "timeout expired",
        "the server did not answer within 10 s: check the host, the port and any firewall in "
        "between",
    ),
    ("SSL", "set sslmode in SAN_DATABASE_URL as the server requires (e.g. ?sslmode=require)"),
    (
        "no pg_hba.conf entry",
        "the server refuses this client: add it to pg_hba.conf, or connect with SSL "
        "(?sslmode=require)",
    ),
)


def connection_fix(message: str) -> str:
    for symptom, fix in CONNECTION_FIXES:
        if symptom.lower() in message.lower():
            return fix
    return "check SAN_DATABASE_URL, the server and the credentials"


def diagnose(database_url: str) -> list[Finding]:
    findings: list[Finding] = []
    try:
        findings.append(Finding(True, f"time zone {san_timezone_name()}"))
    except TimezoneConfigError as error:
        findings.append(
            Finding(False, str(error), "set SAN_TIMEZONE to an IANA zone such as Asia/Seoul")
        )
    try:
        engine = create_san_engine(database_url)
        check_connection(engine)
    except SanConnectionError as error:
        findings.append(Finding(False, str(error), connection_fix(str(error))))
        return findings
    findings.append(Finding(True, f"connected to {redacted(engine.url)}"))
    try:
        if schema_finding(engine, findings):
            for title, check in CONNECTED_CHECKS:
                findings.extend(guarded(engine, title, check))
    finally:
        engine.dispose()
    return findings


def guarded(engine, title: str, check: Callable) -> list[Finding]:
    """One check in a transaction of its own (a failed statement aborts only its own), its
    failure a finding that names it: doctor reports, it never stops at a traceback."""
    try:
        with read_transaction(engine) as conn:
            return check(conn)
    except SQLAlchemyError as error:  # bounded waits: a locked table is reported, not waited on
        reason = first_line(error)
        return [
            Finding(
                False,
                f"{title}: the database answered {reason}",
                "a table may be locked (a migration?) or the server overloaded: look at pg_locks "
                "/ pg_stat_activity, then run doctor again",
            )
        ]
    except Exception as error:
        return [
            Finding(
                False,
                f"{title}: {type(error).__name__}: {error}",
                "report it with this line: doctor could not complete this check",
            )
        ]


def schema_finding(engine, findings: list[Finding]) -> bool:
    """Every table and column; False (nothing else is worth checking) when one is missing."""

    def schema(conn) -> list[Finding]:
        """The SAN tables and columns."""
        try:
            verify_schema(conn)
        except SanSchemaError as error:
            return [Finding(False, str(error), "point SAN_DATABASE_URL at the SAN database")]
        return [Finding(True, "every table and column batch_pipeline uses is present")]

    found = guarded(engine, "The SAN tables and columns", schema)
    findings.extend(found)
    return all(finding.ok for finding in found)


def index_findings(conn) -> list[Finding]:
    """The recommended indexes."""
    advice = index_advice(conn)
    findings = []
    if advice.missing:
        invalid = ", ".join(advice.invalid)
        what = "missing recommended indexes: " + ", ".join(ix.name for ix in advice.missing)
        what += f" (INVALID, left by an interrupted build: {invalid})" if invalid else ""
        what += ". Ready without them, but detection then reads whole tables (slow at SAN's "
        what += "size: docs/benchmarks.md) and the fast lane stays off"
        fix = "run `python -m batch_pipeline create-indexes`, or:\n      "
        fix += ";\n      ".join(advice.create_with) + ";"
        findings.append(Finding(True, what, fix, warning=True))
    if advice.conflicting:  # another index holds a recommended name
        why = ". Detection and the fast lane do not get the index they need"
        what = "recommended index names held by other indexes: " + ", ".join(advice.conflicting)
        findings.append(Finding(True, what + why, conflict_message(advice.conflicting), True))
    if not advice.missing and not advice.conflicting:
        findings.append(Finding(True, "recommended indexes present"))
    if advice.superseded_kept:
        kept = ", ".join(advice.superseded_kept)
        findings.append(Finding(True, f"superseded, kept until replaced: {kept}", warning=True))
    if advice.superseded:
        findings.append(
            Finding(
                True,
                "superseded indexes (replaced by newer recommended ones; they only cost the "
                "app's writes): " + ", ".join(advice.superseded),
                "run `python -m batch_pipeline create-indexes` (it drops them once their "
                "replacements exist), or:\n      " + ";\n      ".join(advice.drop_with) + ";",
                warning=True,
            )
        )
    return findings


def clock_finding(conn) -> list[Finding]:
    """The clock skew between this server and the database."""
    skew = (database_now(conn) - utc_now()).total_seconds()
    ok = abs(skew) <= MAX_CLOCK_SKEW_SECONDS
    return [
        Finding(
            ok,
            f"clock skew database - this server: {skew:+.1f} s",
            "" if ok else "synchronise both clocks (NTP): thresholds are measured in minutes",
        )
    ]


# The settings a new session starts with that batch_pipeline's own transactions replace (the
# values psycopg and the code read with): worth a note when the role's or database's default
# differs, never a problem. Keyed by setting: what batch_pipeline reads with instead.
READ_SETTING_NOTES = {
    "DateStyle": "ISO, MDY",
    "IntervalStyle": "postgres",
    "TimeZone": "UTC",
}


def session_findings(conn) -> list[Finding]:
    """The session settings this role starts with."""
    defaults = dialect(conn).session_defaults(conn)
    findings = []
    odd = [
        f"{name} = {defaults[name]!r}"
        for name, ours in READ_SETTING_NOTES.items()
        if name in defaults and defaults[name] != ours
    ]
    if odd:
        findings.append(
            Finding(
                True,
                "this role's sessions start with "
                + ", ".join(odd)
                + ": batch_pipeline sets "
                + ", ".join(f"{name} = {ours!r}" for name, ours in READ_SETTING_NOTES.items())
                + " for each of its own transactions, so they change nothing it reads",
            )
        )
    findings += wal_compression_findings(conn)
    if defaults.get("default_transaction_read_only") == "on":
        findings.append(
            Finding(
                False,
                "this role's sessions are read-only (default_transaction_read_only = on): every "
                "write batch would fail",
                "ALTER ROLE … SET default_transaction_read_only = off, or connect to the primary",
            )
        )
    return findings


def wal_compression_findings(conn) -> list[Finding]:
    """Whether this role's writes compress their WAL (postgresql/session.py, COMPRESS_OUR_WAL)."""
    if conn.dialect.name != "postgresql":
        return []
    compression = conn.execute(text("SHOW wal_compression")).scalar_one()  # this transaction's
    if compression != "off":
        return [Finding(True, f"batch_pipeline's writes compress their WAL ({compression})")]
    what = (
        "batch_pipeline's writes do not compress their WAL (wal_compression = off, and this role "
        "may not set it): the app's commits flush about twice as much WAL during a run"
    )
    fix = "as a superuser (PostgreSQL 15+): deploy/postgres/grants.sql, or wal_compression = lz4"
    return [Finding(True, what, fix, warning=True)]


def dispatcher_findings(conn) -> list[Finding]:
    """The dispatcher."""
    redis_url = SAN_REDIS_URL.raw() or DEFAULT_REDIS_URL
    try:
        dispatcher = build_dispatcher(
            SAN_JOB_DISPATCHER.raw(),
            conn.dialect.name,
            redis_url,
            SAN_REDIS_STREAM.raw() or REDIS_STREAM,
            SAN_NOTIFY_CHANNEL.raw() or PG_NOTIFY_CHANNEL,
        )
        if isinstance(dispatcher, RedisStreamDispatcher):
            dispatcher.ping()
    except DispatcherConfigError as error:
        return [
            Finding(False, str(error), "set SAN_JOB_DISPATCHER to pg_notify, redis_stream or none")
        ]
    except Exception as error:  # Redis unreachable
        return [
            Finding(
                False,
                f"Redis at {redacted(redis_url)} is unreachable: "
                f"{redact_secrets(str(error), redis_url)}",
                "start Redis or fix SAN_REDIS_URL (jobs are still created, only not announced)",
            )
        ]
    return [Finding(True, f"dispatcher {dispatcher.kind}")]


def app_guarantee_findings(conn) -> list[Finding]:
    """Whether one active job per target is guaranteed by a unique index (the app's side)."""
    present = app_guarantee_index(conn)
    if present:
        return [
            Finding(
                True,
                "one active job per (job_type, target_id) is guaranteed by the unique index "
                f"{present}",
            )
        ]
    doubled = targets_with_two_active_jobs(conn)
    return [
        Finding(
            True,
            "no unique index guarantees one active job per (job_type, target_id): the app's own "
            "enqueue (which does not take batch_pipeline's lock) can race a recovery into two "
            "active jobs for one target"
            + (f"; {doubled} target(s) have two active jobs now" if doubled else ""),
            "for SAN's team to decide (the app's own second enqueue of an active target would "
            "then fail; docs/correctness.md): "
            + app_guarantee_statement(conn.dialect.name)
            + ";"
            + (" Close the doubled active jobs first, or the build fails." if doubled else ""),
            warning=True,
        )
    ]


# What the pipeline does to each table (the README's list): (table, privilege).
REQUIRED_PRIVILEGES = (
    ("users", "SELECT"),
    ("scraps", "SELECT"),
    ("knowledge_cards", "SELECT"),
    ("jobs", "SELECT"),
    ("jobs", "INSERT"),
    ("jobs", "UPDATE"),
    ("daily_summaries", "SELECT"),
    ("daily_summaries", "INSERT"),
)


def privilege_findings(conn) -> list[Finding]:
    """The role's privileges on the SAN tables."""
    missing = dialect(conn).missing_privileges(conn, REQUIRED_PRIVILEGES)
    if not missing:
        return [Finding(True, "this role may read the SAN tables, write jobs and daily_summaries")]
    role = conn.execute(text("SELECT current_user")).scalar_one()
    return [
        Finding(
            False,
            f"role {role} lacks: {', '.join(missing)}",
            f"as the owner of SAN's tables: psql -v role={role} -f deploy/postgres/grants.sql "
            "(docs/production.md, step 1), then run doctor again",
        )
    ]


# Each in a transaction of its own, in this order, once the tables are there.
# Each check after the schema's, with the title a failure of the check itself is reported by.
CONNECTED_CHECKS = (
    ("The role's privileges on the SAN tables", privilege_findings),
    ("The session settings this role starts with", session_findings),
    ("The recommended indexes", index_findings),
    ("The app-side guarantee of one active job per target", app_guarantee_findings),
    ("The clock skew between this server and the database", clock_finding),
    ("The dispatcher", dispatcher_findings),
)


def run_doctor(database_url: str, out: Callable[[str], None] = print) -> int:
    """Exit 0 when ready (warnings included: the pipeline works, a warning says what is worth
    fixing), 1 when not."""
    findings = diagnose(database_url)
    for finding in findings:
        out(f"{'BAD' if not finding.ok else 'warn' if finding.warning else 'ok '}  {finding.what}")
        if finding.fix:
            out(f"     fix: {finding.fix}")
    ready = all(f.ok for f in findings)
    warnings = sum(f.warning for f in findings)
    out(("ready" + (f", with {warnings} warning(s)" if warnings else "")) if ready else "not ready")
    return 0 if ready else 1
