-- The least privilege batch_pipeline needs on SAN's database, for a role that already exists.
-- Run it as the owner of SAN's tables, connected to SAN's database with its schema first on
-- the search path:
--   psql "postgresql://owner@db.internal:5432/san" -v role=batch_pipeline -f deploy/postgres/grants.sql
-- Then `python -m batch_pipeline doctor` (as that role) checks each privilege below.
-- The recommended indexes are built by the tables' owner (`create-indexes`), not by this role.
\set ON_ERROR_STOP on

-- Read every table the recoveries and the TIL look at.
GRANT SELECT ON users, scraps, knowledge_cards TO :"role";
-- Close ghost jobs (UPDATE) and enqueue replacements and new jobs (INSERT).
GRANT SELECT, INSERT, UPDATE ON jobs TO :"role";
-- Create a day's empty summaries for the TIL worker to write.
GRANT SELECT, INSERT ON daily_summaries TO :"role";

-- The schema, and the id sequences of the tables it inserts into, whatever they are named.
SELECT format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), :'role') \gexec
SELECT format('GRANT USAGE ON SEQUENCE %s TO %I', pg_get_serial_sequence(t, 'id'), :'role')
  FROM unnest(ARRAY['jobs', 'daily_summaries']) AS t
  WHERE pg_get_serial_sequence(t, 'id') IS NOT NULL \gexec

-- Optional, PostgreSQL 15 and later, run by a superuser (by anyone else this does nothing):
-- let the role compress the WAL of its own writes with lz4. A recovery run's WAL is mostly
-- full-page images, and the app's commits wait to flush it (docs/benchmarks.md, "The app's
-- latency while batch_pipeline heals"). `doctor` says whether the role's writes compress it.
SELECT format('GRANT SET ON PARAMETER wal_compression TO %I', :'role')
  WHERE current_setting('server_version_num')::int >= 150000
    AND (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) \gexec

-- Optional, run by a superuser or a role that administers pg_read_all_stats (by anyone else
-- this does nothing): let the throttle see the app's sessions in pg_stat_activity (how many
-- run a statement, which wait for a lock of ours). Without it the commit latency alone steers
-- the throttle (docs/configuration.md, "The throttle").
SELECT format('GRANT pg_read_all_stats TO %I', :'role')
  WHERE (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
     OR pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER WITH ADMIN OPTION') \gexec
