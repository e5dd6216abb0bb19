"""Every setting batch_pipeline reads, in one list: the environment (each declared beside the
code that reads it, as a `Setting`) and each job's run config (its pydantic `Config` class).

docs/configuration.md's tables are generated from here (`python -m batch_pipeline.settings
--write`, checked by a test), and the deployment files are checked against SETTINGS: the compose
environment, the run launcher's `env_vars`, the Helm values. A setting added later cannot be
forgotten in one of them.
"""

import argparse
import re
import sys
from enum import Enum
from pathlib import Path

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel

from batch_pipeline.alerts.slack import SAN_ALERT_WEBHOOK_URL, SAN_DAGSTER_BASE_URL
from batch_pipeline.fast_lane.config import (
    SAN_FAST_LANE_ORPHAN_MIN_AGE_MINUTES,
    SAN_REANNOUNCE,
    FastHealConfig,
)
from batch_pipeline.operations.run_retention import DAGSTER_RUN_RETENTION_DAYS
from batch_pipeline.recovery.cadence import SAN_RECOVERY_CRON
from batch_pipeline.recovery.config import RecoveryConfig
from batch_pipeline.recovery.freshness import SAN_RECOVERY_FRESHNESS_HOURS
from batch_pipeline.san.database import SAN_DATA_DIR, SAN_DATABASE_URL
from batch_pipeline.san.dispatch import (
    SAN_JOB_DISPATCHER,
    SAN_NOTIFY_CHANNEL,
    SAN_REDIS_STREAM,
    SAN_REDIS_URL,
)
from batch_pipeline.san.settings import Setting
from batch_pipeline.san.timezone import SAN_TIMEZONE
from batch_pipeline.support.config import ExplainConfig, RedriveConfig
from batch_pipeline.til.config import TilConfig
from batch_pipeline.til.partitions import SAN_TIL_FIRST_DAY

SETTINGS: tuple[Setting, ...] = (
    SAN_DATABASE_URL,
    SAN_DATA_DIR,
    SAN_JOB_DISPATCHER,
    SAN_REDIS_URL,
    SAN_REDIS_STREAM,
    SAN_NOTIFY_CHANNEL,
    SAN_TIMEZONE,
    SAN_TIL_FIRST_DAY,
    SAN_RECOVERY_CRON,
    SAN_RECOVERY_FRESHNESS_HOURS,
    SAN_REANNOUNCE,
    SAN_FAST_LANE_ORPHAN_MIN_AGE_MINUTES,
    DAGSTER_RUN_RETENTION_DAYS,
    SAN_ALERT_WEBHOOK_URL,
    SAN_DAGSTER_BASE_URL,
)

# (job, where its run config goes in the Launchpad, the Config class)
RUN_CONFIGS: tuple[tuple[str, str, type[BaseModel]], ...] = (
    ("recovery_job", "ops.run_recovery.config", RecoveryConfig),
    ("fast_heal_job", "ops.fast_heal.config", FastHealConfig),
    ("til_auto_generation_job", "ops.run_til_auto_generation.config", TilConfig),
    ("explain_job", "ops.explain_target.config", ExplainConfig),
    ("redrive_job", "ops.redrive.config", RedriveConfig),
)

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w.]+) -->\n).*?(<!-- end of generated -->)", re.S)


def environment_table() -> str:
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    rows += [f"| `{s.name}` | {_code(s.default)} | {s.meaning} |" for s in SETTINGS]
    return "\n".join(rows)


def _code(default: str) -> str:
    """A default as the table shows it: a literal value in backticks, prose as it is."""
    if not default:
        return "unset"
    if "`" in default or re.search(r"[A-Za-z]{4,}", default) and " " in default:
        return default
    return f"`{default}`"


def _bounds(field) -> str:
    """A field's pydantic constraints in words: "> 0, ≤ 50,000"."""
    words = ((Gt, "gt", "> {}"), (Ge, "ge", "≥ {}"), (Lt, "lt", "< {}"), (Le, "le", "≤ {}"))
    parts = []
    for rule in field.metadata:
        for kind, attribute, text in words:
            if isinstance(rule, kind):
                value = getattr(rule, attribute)
                parts.append(text.format(f"{value:,}" if isinstance(value, int) else value))
    return ", ".join(parts)


def _default(field) -> str:
    if field.is_required():
        return "required"
    value = field.default
    if value is None:
        return "unset"
    if value == "" or value == []:
        return "empty"
    return f"`{str(value).lower() if isinstance(value, bool) else value}`"


def _allowed(field) -> str:
    """The bounds, or an enum's choices."""
    kind = field.annotation
    if isinstance(kind, type) and issubclass(kind, Enum):
        return ", ".join(f"`{member.value}`" for member in kind)
    return _bounds(field)


def run_config_table(config: type[BaseModel]) -> str:
    rows = ["| field | default | allowed | meaning |", "|---|---|---|---|"]
    for name, field in config.model_fields.items():
        meaning = field.description or ""
        rows.append(f"| `{name}` | {_default(field)} | {_allowed(field)} | {meaning} |")
    return "\n".join(rows)


def generated_blocks() -> dict[str, str]:
    """Each generated table of docs/configuration.md, by its marker's name."""
    blocks = {"environment": environment_table()}
    for job, _path, config in RUN_CONFIGS:
        blocks[job] = run_config_table(config)
    return blocks


def render(document: str) -> str:
    """`document` with every generated block replaced by its current table."""
    blocks = generated_blocks()

    def replace(match: re.Match) -> str:
        return f"{match.group(1)}{blocks[match.group('name')]}\n{match.group(3)}"

    return BLOCK.sub(replace, document)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m batch_pipeline.settings", description=__doc__)
    parser.add_argument("--write", action="store_true", help=f"update {DOC.name} in place")
    args = parser.parse_args(argv)
    current = DOC.read_text()
    updated = render(current)
    if args.write:
        DOC.write_text(updated)
    else:
        print(updated, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
