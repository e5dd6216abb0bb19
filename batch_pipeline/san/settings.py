"""An environment setting, declared once beside the code that reads it: its name, its default
and what it means. batch_pipeline/settings.py lists them all; the docs' table, the compose
file, the run launcher's `env_vars` and the Helm values are checked against that list."""

import os
from dataclasses import dataclass


class SettingError(ValueError):
    """An environment setting has a value the code cannot use (named, with the rule)."""


@dataclass(frozen=True)
class Setting:
    name: str
    default: str  # as the docs show it; "" when unset means "not used"
    meaning: str
    # Read when the code location loads: every process that loads it (the code server, each
    # run's container or pod) must see the same value.
    loaded_with_the_code: bool = True
    secret: bool = False  # never written into a deployment file

    def raw(self) -> str | None:
        """The value set in the environment, stripped; None when unset or empty."""
        value = (os.environ.get(self.name) or "").strip()
        return value or None

    def whole_number(self, default: int, low: int, high: int) -> int:
        """The value as a whole number in [low, high], `default` when unset."""
        raw = self.raw()
        if raw is None:
            return default
        if not raw.isdigit() or not low <= int(raw) <= high:
            raise SettingError(
                f"{self.name}={raw!r} must be a whole number from {low} to {high} ({self.meaning})"
            )
        return int(raw)

    def number(self, default: float, low_exclusive: float, high: float) -> float:
        """The value as a number in (low_exclusive, high], `default` when unset."""
        raw = self.raw()
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            value = float("nan")
        if not low_exclusive < value <= high:
            raise SettingError(
                f"{self.name}={raw!r} must be a number above {low_exclusive:g} and at most "
                f"{high:g} ({self.meaning})"
            )
        return value
