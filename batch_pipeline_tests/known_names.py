"""Names outside batch_pipeline's own settings that its docs and deployment files may use."""

# Dagster's own variables the docs may name besides batch_pipeline's settings.
DAGSTER_VARIABLES = {
    "DAGSTER_HOME",
    "DAGSTER_PG_HOST",
    "DAGSTER_PG_PORT",
    "DAGSTER_PG_USER",
    "DAGSTER_PG_PASSWORD",
    "DAGSTER_PG_DB",
    "DAGSTER_DAEMON_HEARTBEAT_TOLERANCE",
    "DAGSTER_CURRENT_IMAGE",
    "DAGSTER_CODE_SERVER_HOST",
    "DAGSTER_CODE_SERVER_PORT",
    "DAGSTER_RUN_NETWORK",
    "DAGSTER_RUN_JOB_NAME",
    "SAN_TEST_DATABASE_URL",  # the test suite's
}
