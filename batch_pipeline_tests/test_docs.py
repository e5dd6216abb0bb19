"""The docs say only what exists: every command and flag they name is one the CLI takes, every
setting one the code reads, every job, schedule, sensor and asset one the code location has,
every link a file of the repository. The Korean pages are held to the same, and linked from
the English front page."""

import contextlib
import io
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from batch_pipeline.__main__ import main
from batch_pipeline.definitions import defs
from batch_pipeline.settings import SETTINGS
from batch_pipeline_tests.known_names import DAGSTER_VARIABLES
from batch_pipeline_tests.ui.paths import SIDEBAR, documented_paths
from san_sandbox.faults import Faults

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(
    [ROOT / "README.md", ROOT / "README.ko.md", *(ROOT / "docs").glob("*.md")]
    + list((ROOT / "docs" / "ko").glob("*.md"))
)
KOREAN = [ROOT / "README.ko.md", *sorted((ROOT / "docs" / "ko").glob("*.md"))]
# The pages SAN's team acts on, in Korean (README.ko.md links each).
KOREAN_PAGES = (
    "operating.md",
    "production.md",
    "worker-contract.md",
    "til.md",
    "running.md",
    "sandbox.md",
    "glossary.md",
)
# English terms the glossary (docs/ko/glossary.md) gives a Korean word for: outside code and
# a parenthesis after that word, a Korean page never leaves them in English.
GLOSSARY_TERMS = {"dry run": "시험 실행", "claim": "선점"}
# The design's own Korean terms, and the ones an earlier translation used instead.
DESIGN_TERMS = ("유령 잡", "고아 스크랩", "지식카드", "파편", "복구 스케줄러")
NOT_THE_DESIGN_S = ("고스트", "카드 없는 스크랩", "조각", "지식 카드")
# `python -m bench.… --flag` and `python -m san_sandbox sub --flag` in the docs.
MODULE_COMMAND = re.compile(r"python -m (bench\.[a-z_]+|san_sandbox(?: [a-z-]+)?)((?: [^`\n|)]*)?)")
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


def test_the_korean_pages_exist_and_the_front_pages_link_them():
    assert "README.ko.md" in (ROOT / "README.md").read_text()
    korean_front = (ROOT / "README.ko.md").read_text()
    assert {page.name for page in KOREAN[1:]} == set(KOREAN_PAGES)
    for page in KOREAN:
        if page.name != "README.ko.md":
            assert f"docs/ko/{page.name}" in korean_front, page
        assert len(re.findall(r"[\uac00-\ud7a3]", page.read_text())) > 500  # written in Korean


def sections(page: Path) -> list[str]:
    return re.findall(r"^## (.+)$", page.read_text(), re.M)


def test_the_korean_front_page_has_every_section_of_the_english_one():
    english, korean = sections(ROOT / "README.md"), sections(ROOT / "README.ko.md")
    assert len(korean) == len(english), (english, korean)
    # the design's service names map to assets in both
    for service in (
        "GhostJobRecoveryService",
        "OrphanScrapRecoveryService",
        "OrphanScrapRefineRecoveryService",
        "TilAutoGenerationScheduleService",
    ):
        for front in ("README.md", "README.ko.md"):
            assert service in (ROOT / front).read_text(), (service, front)  # fmt: skip


def test_the_korean_pages_speak_the_design_s_terms():
    front = (ROOT / "README.ko.md").read_text()
    assert [term for term in DESIGN_TERMS if term not in front] == []
    for page in KOREAN:
        text = page.read_text()
        assert [term for term in NOT_THE_DESIGN_S if term in text] == [], page


def prose(text: str) -> str:
    """A page without its code: fenced blocks, inline code and parentheses."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.sub(r"`[^`\n]*`|\([^()\n]*\)", "", text)


def test_the_korean_pages_use_the_glossary_s_words():
    glossary = (ROOT / "docs" / "ko" / "glossary.md").read_text()
    for english, korean in GLOSSARY_TERMS.items():
        assert f"| {english} | {korean} |" in glossary
        left = [
            p.name for p in KOREAN if p.name != "glossary.md" and english in prose(p.read_text())
        ]
        assert left == [], (english, left)


def test_every_ui_path_the_docs_give_names_what_the_code_location_has():
    """The step after Jobs is a job, after Catalog an asset or a group; the browser test
    (ui/test_dagster_ui.py) follows every path to its end."""
    repository = defs.get_repository_def()
    jobs = {job.name for job in repository.get_all_jobs()}
    specs = list(defs.resolve_all_asset_specs())
    assets = {spec.key.to_user_string() for spec in specs}
    groups = {f"group {spec.group_name}" for spec in specs}
    wrong = [
        (steps, where)
        for steps, where in documented_paths().items()
        if steps[0] in SIDEBAR
        and steps[1:2]
        and steps[1] not in {"Jobs": jobs, "Catalog": assets | groups}.get(steps[0], {steps[1]})
    ]
    assert wrong == []
    assert len(documented_paths()) >= 10  # the parser still finds them


def display_columns(line: str) -> dict[int, str]:
    """Box-drawing characters by the terminal column they show at (Hangul is two wide)."""
    columns, at = {}, 0
    for char in line:
        if char in "│┤┘┐└▲":
            columns[at] = char
        at += 2 if unicodedata.east_asian_width(char) in "WF" else 1
    return columns


@pytest.mark.parametrize("front", ["README.md", "README.ko.md"])
def test_the_diagram_s_lines_meet_in_a_monospace_font(front):
    """Each vertical stroke has a stroke or an arrow right above it, counted in display columns."""
    diagram = (ROOT / front).read_text().split("```\n", 2)[1].splitlines()
    rows = [display_columns(line) for line in diagram]
    broken = [
        (number, column)
        for number in range(1, len(rows))
        for column, char in rows[number].items()
        if char in "│┤┘└" and column not in rows[number - 1]
    ]
    assert broken == [], broken


def module_help(module: str) -> str | None:
    command = [sys.executable, "-m", *module.split(), "--help"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    return done.stdout if done.returncode == 0 else None


def test_every_benchmark_and_sandbox_command_the_docs_show_takes_its_flags():
    shown: dict[str, set[str]] = {}
    for page in PAGES:
        for module, rest in MODULE_COMMAND.findall(page.read_text()):
            flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", rest))
            shown.setdefault(module, set()).update(flags)
    assert "bench.time_to_heal" in shown and "san_sandbox ui" in shown
    problems = []
    for module, flags in sorted(shown.items()):
        helped = module_help(module)
        if helped is None:
            problems.append(f"no command `python -m {module}`")
            continue
        problems += [f"`{module}` takes no {flag}" for flag in sorted(flags) if flag not in helped]
    assert problems == []


def test_the_front_page_stays_short_and_its_test_command_is_ci_s():
    assert len((ROOT / "README.md").read_bytes()) <= 8 * 1024
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in (ROOT / "README.md").read_text() and ci.rstrip().endswith("make test")


def test_every_make_target_the_docs_show_exists():
    """`make X` in code (backticks or a code block's line), never in prose."""
    targets = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.M))
    shown = set()
    for page in PAGES:
        text = page.read_text()
        blocks = "\n".join(re.findall(r"```[a-z]*\n(.*?)```", text, re.S))
        shown |= set(re.findall(r"`make ([a-z][a-z-]*)", text))
        shown |= set(re.findall(r"^make ([a-z][a-z-]*)", blocks, re.M))
    assert {"run", "test"} <= shown
    assert shown - targets == set()
