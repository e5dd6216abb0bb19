"""The fault knobs: validated, deterministic, at the rates asked for."""

import pytest
from pydantic import ValidationError

from san_sandbox.faults import Faults


@pytest.mark.parametrize(
    "knob",
    [
        "event_lost",
        "app_dies_before_enqueue",
        "worker_dies_mid_job",
        "ai_fails",
        "poison",
        "slow_worker",
    ],
)
@pytest.mark.parametrize("value", [-0.1, 1.5, "often"])
def test_a_probability_out_of_range_or_not_a_number_is_refused_by_name(knob, value):
    with pytest.raises(ValidationError, match=knob):
        Faults(**{knob: value})


def test_an_unknown_knob_is_refused():
    with pytest.raises(ValidationError, match="worker_explodes"):
        Faults(worker_explodes=0.5)


def test_draws_are_deterministic_per_seed_and_match_the_rate():
    faults = Faults(event_lost=0.2, seed=7)
    draws = [faults.happens("event_lost", key) for key in range(20_000)]
    assert draws == [
        Faults(event_lost=0.2, seed=7).happens("event_lost", key) for key in range(20_000)
    ]
    assert draws != [
        Faults(event_lost=0.2, seed=8).happens("event_lost", key) for key in range(20_000)
    ]
    assert 0.19 < sum(draws) / len(draws) < 0.21
    assert not any(Faults().happens("event_lost", key) for key in range(1000))
    assert all(Faults(ai_fails=1.0).happens("ai_fails", key) for key in range(1000))


def test_knobs_draw_independently():
    faults = Faults(event_lost=0.5, ai_fails=0.5)
    both = sum(
        faults.happens("event_lost", k) and faults.happens("ai_fails", k) for k in range(20_000)
    )
    assert 0.23 < both / 20_000 < 0.27


def test_the_convergence_rates_fail_about_40_percent_of_attempts():
    """Drawn per job, as the worker draws them: an attempt fails when its event is lost, its
    worker dies or is slow, or the AI fails; the share that does is the rate the convergence
    experiment's prediction uses, and about 40 %."""
    faults = Faults.convergence_rates()
    knobs = ("event_lost", "worker_dies_mid_job", "slow_worker", "ai_fails")
    attempts = range(50_000)
    failed = sum(any(faults.happens(knob, job) for knob in knobs) for job in attempts)
    share = failed / len(attempts)
    assert 0.38 < share < 0.46
    assert share == pytest.approx(faults.attempt_failure_rate, abs=0.01)
