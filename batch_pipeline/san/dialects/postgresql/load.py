"""The throttle's signals (san/throttle.py), read from PostgreSQL itself, no extension needed:
one small transaction, timed whole as an app's is (its statements wait for a core as the app's
do, and its commit, with synchronous_commit on and a transaction id taken, waits for the WAL
flush as an app commit does), whose statement reads the app's active sessions, app sessions
blocked by batch_pipeline's, the replicas' replay lag, and the app's sessions on SAN's database
that ran a statement within the last APP_AT_WORK_WITHIN (the app at work between two of its
short transactions; the Dagster instance's database, if on the same server, is not SAN's).

Its cost: one commit record of WAL and one pass over the backends' status (a few hundred rows
at most) per reading, about 0.4 ms of the server's CPU; san/sampler.py sets their pace.
A role that is not a superuser sees other roles' sessions only with pg_monitor (or
pg_read_all_stats, deploy/postgres/grants.sql): without it the app's sessions on SAN's database
count as unseen, and the commit latency alone steers (slowed by our own writes too, so an idle
database is written more slowly than with the grant).
"""

import os
import time

from sqlalchemy import text
from sqlalchemy.engine import Engine

from batch_pipeline.san.throttle import APP_AT_WORK_WITHIN, Signals

APPLICATION_NAME = "batch_pipeline"  # our sessions' (create_engine's connect_args)
# One pass over the backends' status, read from the function under pg_stat_activity, not the
# view: each statement is planned anew (no prepared statements: session.py), and rewriting the
# views took 3.8 ms a reading against 0.4 ms, enough CPU at ten readings a second to raise the
# app's p99 1.3x on two cores (docs/benchmarks.md, "The feedback throttle").
READ_LOAD = text(
    """
    SELECT txid_current(),
      count(*) FILTER (WHERE a.state = 'active'),
      count(*) FILTER (
        WHERE a.wait_event_type = 'Lock'
          AND EXISTS (SELECT 1 FROM pg_stat_get_activity(NULL) o
                       WHERE o.pid = ANY (pg_blocking_pids(a.pid)) AND o.application_name = :ours)),
      (SELECT max(extract(epoch FROM w.replay_lag)) FROM pg_stat_get_wal_senders() w),
      count(*) FILTER (
        WHERE a.datid = san.oid
          AND (a.state = 'active'
               OR a.state_change > clock_timestamp() - make_interval(secs => :at_work_within))),
      count(*) FILTER (WHERE a.datid = san.oid AND a.backend_type IS NULL)
    FROM pg_stat_get_activity(NULL) a,
         (SELECT d.oid FROM pg_database d WHERE d.datname = current_database()) san
    -- a NULL backend_type: a session our role may not see (without pg_read_all_stats)
    WHERE (a.backend_type = 'client backend' OR a.backend_type IS NULL)
      AND a.pid <> pg_backend_pid() AND a.application_name IS DISTINCT FROM :ours
    """
)
SYNCHRONOUS_COMMIT = text("SELECT set_config('synchronous_commit', 'on', true)")


def read_load(engine: Engine) -> Signals:
    with engine.connect() as conn:
        started = time.perf_counter()  # the transaction as an app's: statements and commit
        transaction = conn.begin()
        try:
            conn.execute(SYNCHRONOUS_COMMIT)
            _, active, blocked, lag, at_work, unseen = conn.execute(
                READ_LOAD, {"ours": APPLICATION_NAME, "at_work_within": APP_AT_WORK_WITHIN}
            ).one()
            transaction.commit()
            probe_seconds = time.perf_counter() - started
        except BaseException:
            transaction.rollback()
            raise
    return Signals(
        probe_seconds=probe_seconds,
        active_app_sessions=int(active),
        blocked_by_us=int(blocked),
        replica_lag_seconds=float(lag) if lag is not None else None,
        cores=os.cpu_count() or 1,
        app_sessions_at_work=int(at_work),
        app_sessions_unseen=int(unseen),
    )
