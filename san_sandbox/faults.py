"""The sandbox's fault knobs: each a probability, validated.

Every decision about a job is drawn from a hash of (seed, knob, job id), not from a shared
random stream: all worker processes agree on it (four listeners hear one pg_notify; they all
treat its event as lost or none does), and a run is reproducible from its seed whatever the
scheduling of the processes.
"""

import argparse
import hashlib
import math
from statistics import NormalDist

from pydantic import BaseModel, ConfigDict, Field, model_validator

# The standard normal quantile of p99: a lognormal's p99 is median x e^(2.326 sigma).
P99_Z = NormalDist().inv_cdf(0.99)


class Faults(BaseModel):
    """What goes wrong, and how often."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_lost: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="A job's announcement never reaches a worker: the job stays PENDING.",
    )
    app_dies_before_enqueue: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="The app saves the scrap and dies before creating its jobs.",
    )
    worker_dies_mid_job: float = Field(
        0.0, ge=0.0, le=1.0, description="The worker claims the job and dies: it stays PROCESSING."
    )
    ai_fails: float = Field(
        0.0, ge=0.0, le=1.0, description="The AI call fails: the job ends FAILED."
    )
    poison: float = Field(
        0.0, ge=0.0, le=1.0, description="A saved scrap is poison: every AI call on it fails."
    )
    slow_worker: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="The worker finishes only after recovery has given up on the job.",
    )
    reannouncement_lost: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="A re-announcement of a job (the fast lane's) is lost. Unset: as event_lost, "
        "each announcement drawn on its own.",
    )
    first_attempts_only: bool = Field(
        False,
        description="Lost events and AI failures strike only a target's first job (the app's first "
        "attempt); "
        "a re-announcement follows reannouncement_lost.",
    )
    claim_delay_median_s: float = Field(
        0.0,
        ge=0.0,
        le=600.0,
        description="Busy workers: each announcement heard is claimed after "
        "a delay drawn from a lognormal with this median (0: at once).",
    )
    claim_delay_p99_s: float = Field(
        0.0, ge=0.0, le=3600.0, description="... and this p99 (at least the median)."
    )
    ai_down_from: float | None = Field(
        None, description="An outage: every AI call fails from this instant (epoch seconds) ..."
    )
    ai_down_until: float | None = Field(None, description="... until this one.")
    seed: int = Field(0, description="Same seed, same faults.")

    @model_validator(mode="after")
    def _delays_and_outage_in_order(self) -> "Faults":
        if self.claim_delay_median_s and self.claim_delay_p99_s < self.claim_delay_median_s:
            raise ValueError("claim_delay_p99_s must be at least claim_delay_median_s")
        if (self.ai_down_from is None) != (self.ai_down_until is None) or (
            self.ai_down_from is not None and self.ai_down_until < self.ai_down_from
        ):
            raise ValueError("an outage needs ai_down_from <= ai_down_until, both or neither")
        return self

    @classmethod
    def convergence_rates(cls, seed: int = 0) -> "Faults":
        """The rates of the convergence experiment (docs/reliability.md)."""
        return cls(
            event_lost=0.20,
            app_dies_before_enqueue=0.05,
            worker_dies_mid_job=0.10,
            ai_fails=0.15,
            poison=0.01,
            slow_worker=0.05,
            seed=seed,
        )

    def announcement_lost(self, job_id: int, delivery: int) -> bool:
        """Whether the `delivery`-th announcement of a job (1: the app's) is lost."""
        if delivery == 1:
            return self.happens("event_lost", job_id)
        knob = "event_lost" if self.reannouncement_lost is None else "reannouncement_lost"
        return self.happens(knob, f"{job_id}:{delivery}")

    def claim_delay(self, job_id: int, delivery: int) -> float:
        """Seconds a busy worker takes to claim the `delivery`-th announcement of a job it heard:
        lognormal (median, p99), drawn per (job, delivery); 0 when workers are not busy."""
        if not self.claim_delay_median_s:
            return 0.0
        sigma = math.log(self.claim_delay_p99_s / self.claim_delay_median_s) / P99_Z
        uniform = self._draw("claim_delay", f"{job_id}:{delivery}")
        z = NormalDist().inv_cdf(min(max(uniform, 1e-9), 1 - 1e-9))
        return self.claim_delay_median_s * math.exp(sigma * z)

    def ai_down(self, at: float) -> bool:
        """Whether the AI service is down at this instant (epoch seconds)."""
        return self.ai_down_from is not None and self.ai_down_from <= at < self.ai_down_until

    def _draw(self, knob: str, key: int | str) -> float:
        digest = hashlib.blake2b(f"{self.seed}:{knob}:{key}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64

    def happens(self, knob: str, key: int | str) -> bool:
        """Whether fault `knob` strikes the thing identified by `key` (a job or scrap id)."""
        probability = getattr(self, knob)
        if probability <= 0.0:
            return False
        return self._draw(knob, key) < probability

    @property
    def attempt_failure_rate(self) -> float:
        """How often one job attempt leaves its need unmet at the end of its cycle: its event
        was lost, its worker died or is slow (its result lands only in the next cycle), or the
        AI failed. Poison is not a rate per attempt: a poison scrap fails every attempt."""
        succeeds = (
            (1 - self.event_lost)
            * (1 - self.worker_dies_mid_job)
            * (1 - self.slow_worker)
            * (1 - self.ai_fails)
        )
        return 1 - succeeds


FAULT_FLAGS = {
    "event_lost": "--event-lost",
    "app_dies_before_enqueue": "--app-dies",
    "worker_dies_mid_job": "--worker-dies",
    "ai_fails": "--ai-fails",
    "poison": "--poison",
    "slow_worker": "--slow",
}


def add_fault_flags(parser: argparse.ArgumentParser, default: Faults) -> None:
    group = parser.add_argument_group("faults (probabilities, 0..1)")
    for field, flag in FAULT_FLAGS.items():
        group.add_argument(
            flag,
            dest=field,
            type=float,
            default=getattr(default, field),
            help=f"{Faults.model_fields[field].description} (default {getattr(default, field)})",
        )
    group.add_argument("--seed", type=int, default=0, help="same seed, same faults")


def faults_from(args) -> Faults:
    return Faults(
        seed=args.seed,
        reannouncement_lost=getattr(args, "reannouncement_lost", None),
        **{field: getattr(args, field) for field in FAULT_FLAGS},
    )
