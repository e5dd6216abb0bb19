"""explain_target: the op of explain_job. It reads SAN's database and the instance's audit
trail and shows the story as the run's Markdown metadata; it writes nothing."""

from dagster import Failure, MetadataValue, OpExecutionContext, Out, Output, op

from batch_pipeline.san.ops import retried_only_if_transient
from batch_pipeline.san.resources import SanDatabase
from batch_pipeline.support.config import ExplainConfig
from batch_pipeline.support.explain import as_markdown, as_text, explain
from batch_pipeline.support.story import NotFound


@op(
    out=Out(description="Nothing: the story is this output's metadata."),
    description="The story of one scrap, summary or job: its facts, its jobs, the verdict of the "
    "recoveries' rules now, and every run that touched it (Markdown metadata of this step).",
)
def explain_target(context: OpExecutionContext, config: ExplainConfig, san_database: SanDatabase):
    engine = san_database.open_verified()
    with retried_only_if_transient():
        try:
            explanation = explain(engine, context.instance, config.kind.value, config.id)
        except NotFound as error:
            raise Failure(description=str(error), allow_retries=False) from None
    context.log.info(as_text(explanation))
    return Output(
        None,
        metadata={
            "story": MetadataValue.md(as_markdown(explanation)),
            "verdicts": MetadataValue.json(
                [
                    {"area": v.area, "state": v.state, "says": v.says}
                    for v in explanation.story.verdicts
                ]
            ),
            "runs_that_touched_it": len(explanation.touches),
        },
    )
