"""Helpers of the target recoveries' tests (targets.py's detection, target_writes.py's writes):
each recovery of the registry, a target that needs its work, a healthy one, detect, recover."""

import pytest

from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.recovery.plan import MAX_ATTEMPTS, MAX_ENQUEUE_PER_RUN, RecoveryPolicy
from batch_pipeline.recovery.registry import RECOVERIES
from batch_pipeline.recovery.target_writes import recover_targets
from batch_pipeline.recovery.targets import ORPHAN_MIN_AGE, TargetRecovery, detect_targets
from batch_pipeline.recovery.unrefined_scraps import UNREFINED_SCRAPS
from batch_pipeline.recovery.unwritten_tils import UNWRITTEN_TILS
from batch_pipeline.san.dispatch import Dispatcher

TARGET_RECOVERIES = [recovery for recovery in RECOVERIES if isinstance(recovery, TargetRecovery)]
RULES = pytest.mark.parametrize("rule", TARGET_RECOVERIES, ids=[r.name for r in TARGET_RECOVERIES])
SCRAP_RULES = pytest.mark.parametrize(
    "rule", [ORPHAN_SCRAPS, UNREFINED_SCRAPS], ids=["orphan", "unrefined"]
)


def needy_scrap(db, rule, user, **kwargs):
    """A target that needs `rule.job_type`: a scrap with no card (orphan), a scrap not refined
    (unrefined), a summary with no content (unwritten TIL)."""
    if rule is ORPHAN_SCRAPS:
        return db.scrap(user, card=False, refined=True, **kwargs)
    if rule is UNREFINED_SCRAPS:
        return db.scrap(user, card=True, refined=False, **kwargs)
    return db.summary(user, **kwargs)


def healthy_target(db, rule, user, **kwargs):
    if rule is UNWRITTEN_TILS:
        return db.summary(user, content="TIL", **kwargs)
    return db.scrap(user, card=True, refined=True, **kwargs)


def detect(db, rule, min_age=ORPHAN_MIN_AGE):
    with db.engine.connect() as conn:
        return detect_targets(conn, rule, now=db.now, min_age=min_age)


def recover(
    db,
    rule,
    candidates,
    max_attempts=MAX_ATTEMPTS,
    max_enqueue_per_run=MAX_ENQUEUE_PER_RUN,
    batch_size=1000,
    dry_run=False,
):
    return recover_targets(
        db.engine,
        Dispatcher(),
        rule,
        candidates,
        now=db.now,
        thresholds={},
        policy=RecoveryPolicy(
            max_attempts=max_attempts,
            max_enqueue_per_run=max_enqueue_per_run,
            batch_size=batch_size,
            dry_run=dry_run,
        ),
    )
