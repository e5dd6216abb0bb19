"""The docs say only what exists: every command and flag they name is one the CLI takes, every
setting one the code reads, every job, schedule, sensor and asset one the code location has,
every link a file of the repository. The Korean pages are held to the same, and linked from
the English front page."""

import contextlib
import io
import re
from pathlib import Path

import pytest

from batch_pipeline.__main__ import main
from batch_pipeline.definitions import defs
from batch_pipeline.settings import SETTINGS
from san_sandbox.faults import Faults

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(
    [ROOT / "README.md", ROOT / "README.ko.md", *(ROOT / "docs").glob("*.md")]
    + list((ROOT / "docs" / "ko").glob("*.md"))
)
KOREAN = [ROOT / "README.ko.md", ROOT / "docs" / "ko" / "operating.md"]
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
COMMAND = re.compile(r"python -m batch_pipeline ([a-z-]+)((?: [^`\n|]*)?)")
VARIABLE = re.compile(r"\b((?:SAN|DAGSTER)_[A-Z0-9_]+)\b(?!\*)")  # DAGSTER_PG_*: a family
DAGSTER_NAME = re.compile(r"`([a-z][a-z0-9_]*_(?:job|schedule|sensor|alert))`")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def help_of(command: str) -> str | None:
    """The subcommand's --help, or None if the CLI has no such command."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            main([command, "--help"])
        except SystemExit as exit_:
            if exit_.code != 0:
                return None
    return out.getvalue()


def names_in_the_code_location() -> set[str]:
    repository = defs.get_repository_def()
    return {
        *(job.name for job in repository.get_all_jobs()),
        *(schedule.name for schedule in repository.schedule_defs),
        *(sensor.name for sensor in repository.sensor_defs),
    }


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_command_flag_setting_name_and_link_of_the_page_exists(page):
    text = page.read_text()
    problems = []
    helps: dict[str, str | None] = {}
    for command, rest in COMMAND.findall(text):
        if command == "sandbox" or command == "settings":
            continue  # python -m san_sandbox / .settings: their own CLIs
        helps.setdefault(command, help_of(command))
        if helps[command] is None:
            problems.append(f"no command `{command}`")
            continue
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", rest):
            if flag not in helps[command]:
                problems.append(f"`{command}` takes no {flag}")
    settings = {setting.name for setting in SETTINGS} | DAGSTER_VARIABLES
    problems += [f"no setting {name}" for name in sorted(set(VARIABLE.findall(text)) - settings)]
    known = names_in_the_code_location() | set(Faults.model_fields)  # the sandbox's faults
    problems += [f"no {name} in the code location" for name in sorted(
        set(DAGSTER_NAME.findall(text)) - known
    )]  # fmt: skip
    for target in LINK.findall(text):
        if "://" in target:
            continue
        if not (page.parent / target).exists():
            problems.append(f"broken link {target}")
    assert problems == []


def test_the_korean_pages_exist_and_the_english_front_page_links_them():
    front = (ROOT / "README.md").read_text()
    for page in KOREAN:
        assert page.exists()
        assert str(page.relative_to(ROOT)) in front
        assert len(re.findall(r"[\uac00-\ud7a3]", page.read_text())) > 500  # written in Korean


def test_the_front_page_stays_short_and_its_test_command_is_ci_s():
    assert len((ROOT / "README.md").read_bytes()) <= 8 * 1024
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in (ROOT / "README.md").read_text() and ci.rstrip().endswith("make test")
