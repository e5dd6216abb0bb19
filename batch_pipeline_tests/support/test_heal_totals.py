"""The heal totals: folded from the audit once each, kept when the runs are deleted."""

from dagster import instance_for_test

from batch_pipeline.recovery.registry import AREAS
from batch_pipeline.san.tables import CARD_ANALYSIS, PENDING
from batch_pipeline.support.heal_totals import (
    FAST_LANE,
    RECOVERY_LANE,
    read_heal_totals,
    update_heal_totals,
)
from batch_pipeline_tests.runs import broken_state, run_recovery


def test_totals_count_each_heal_once_and_survive_the_runs_deletion(san_db):
    broken_state(san_db)  # 1 ghost, 1 orphan, 1 unrefined scrap, 1 unwritten TIL
    with instance_for_test() as instance:
        result, _ = run_recovery(san_db, instance)
        assert result.success
        assert update_heal_totals(instance) == len(AREAS)  # one materialization per area
        totals = read_heal_totals(instance)
        assert totals.healed == dict.fromkeys(AREAS, 1)
        assert sum(totals.buckets[RECOVERY_LANE].values()) == 4
        # the ghost had waited just over 2 h since it started, the others just over 3 h
        assert totals.buckets[RECOVERY_LANE]["10800"] == 1
        assert totals.buckets[RECOVERY_LANE]["21600"] == 3
        assert 4 * 7200 < totals.age_sum_seconds[RECOVERY_LANE] < 3 * 10800 + 7300
        assert FAST_LANE not in totals.buckets

        assert update_heal_totals(instance) == 0  # nothing new: nothing added twice
        for _ in range(3):  # another ghost, healed by a second run
            san_db.job(CARD_ANALYSIS, 10_000 + _, PENDING, created_at=san_db.ago(hours=1))
        run_recovery(san_db, instance)
        update_heal_totals(instance)
        assert read_heal_totals(instance).healed["ghost_job_recovery"] == 4

        for record in instance.get_run_records():  # run retention deletes the runs
            instance.delete_run(record.dagster_run.run_id)
        update_heal_totals(instance)
        after = read_heal_totals(instance)
        assert after.healed["ghost_job_recovery"] == 4  # monotonic: stored, not recounted
        assert sum(after.buckets[RECOVERY_LANE].values()) == 7


def test_a_fold_that_dies_before_its_write_is_redone_whole(san_db, monkeypatch):
    broken_state(san_db)
    with instance_for_test() as instance:
        run_recovery(san_db, instance)
        storage = instance.daemon_cursor_storage
        real_write = storage.set_cursor_values

        def dies(pairs):
            raise RuntimeError("the daemon died")

        monkeypatch.setattr(storage, "set_cursor_values", dies)
        try:
            update_heal_totals(instance)
        except RuntimeError:
            pass
        monkeypatch.setattr(storage, "set_cursor_values", real_write)
        assert read_heal_totals(instance).healed == {}
        update_heal_totals(instance)
        assert read_heal_totals(instance).healed == dict.fromkeys(AREAS, 1)
