"""Alert sensors: a failed run of any job, and a failed asset check in a check run."""

from dagster import (
    DagsterEventType,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunFailureSensorContext,
    RunStatusSensorContext,
    run_failure_sensor,
    run_status_sensor,
)

from batch_pipeline.alerts.slack import post_alert, run_link

# Runs an operator starts by hand and watches (explain_job, redrive_job): their failure (an id not
# found, nothing matching) is the operator's answer, not an alert for the channel.
OPERATOR_RUN_TAG = "batch_pipeline/operator_run"


def run_failure_text(context: RunFailureSensorContext) -> str:
    run = context.dagster_run
    steps = sorted(
        {event.step_key for event in context.get_step_failure_events() if event.step_key}
    )
    reason = context.failure_event.message or "run failed"
    return (
        f":red_circle: batch_pipeline job *{run.job_name}* failed (run `{run.run_id}`)"
        + (f" at step {', '.join(steps)}" if steps else "")
        + f": {reason}\n{run_link(run.run_id)}"
    )


@run_failure_sensor(
    name="run_failure_alert",
    default_status=DefaultSensorStatus.RUNNING,
    monitor_all_code_locations=False,
    description="Posts every failed run to SAN_ALERT_WEBHOOK_URL (logged when unset), but those "
    "of the operator's own explain_job and redrive_job runs.",
)
def run_failure_alert(context: RunFailureSensorContext):
    text = run_failure_text(context)
    context.log.info(text)
    if context.dagster_run.tags.get(OPERATOR_RUN_TAG):
        return  # the operator who launched it is looking at it (explain, redrive)
    post_alert(text)


def failed_checks_text(context: RunStatusSensorContext) -> str | None:
    run = context.dagster_run
    records = context.instance.get_records_for_run(
        run.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION
    ).records
    failed = []
    for record in records:
        evaluation = record.event_log_entry.dagster_event.event_specific_data
        if not evaluation.passed:
            partition = (
                f" [{evaluation.partition}]" if getattr(evaluation, "partition", None) else ""
            )
            failed.append(
                f"• {evaluation.severity.value} `{evaluation.asset_key.to_user_string()}` check "
                f"*{evaluation.check_name}*{partition}: {evaluation.description or 'failed'}"
            )
    if not failed:
        return None
    return (
        f":warning: batch_pipeline asset checks failed in run `{run.run_id}` ({run.job_name}):\n"
        + "\n".join(failed)
        + f"\n{run_link(run.run_id)}"
    )


@run_status_sensor(
    name="asset_check_alert",
    run_status=DagsterRunStatus.SUCCESS,
    # every job of the code location: a failed check is posted whichever run evaluated it
    monitor_all_code_locations=False,
    default_status=DefaultSensorStatus.RUNNING,
    description="Posts every failed asset check to SAN_ALERT_WEBHOOK_URL (logged when unset).",
)
def asset_check_alert(context: RunStatusSensorContext):
    text = failed_checks_text(context)
    if text:
        context.log.info(text)
        post_alert(text)
