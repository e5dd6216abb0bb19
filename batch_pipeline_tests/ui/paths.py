"""The UI paths the docs give ("**Jobs → recovery_job**", "*Overview → Metadata → Plots*"), read
from the docs themselves: test_docs.py checks that each names what the code location defines,
ui/test_dagster_ui.py follows each in the browser."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The Dagster UI's left navigation; a path that starts elsewhere starts on an asset's page.
# Not its "Overview": the docs' "Overview → Metadata → Plots" is an asset page's first tab.
SIDEBAR = ("Runs", "Catalog", "Jobs", "Automation", "Lineage", "Deployment")
# Buttons a path ends on that would launch a run: shown, never pressed by the walk.
LAUNCHES = ("Materialize all", "Materialize", "Launch Run")
_PATH = re.compile(r"(?<![*\w])(\*\*|\*)(?!\s)([^*\n]+?→[^*\n]+?)\1(?![*\w])")


def doc_files() -> list[Path]:
    return [
        ROOT / "README.md",
        ROOT / "README.ko.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "docs" / "ko").glob("*.md")),
    ]


def steps_of(text: str) -> tuple[str, ...]:
    """'Catalog → group `san_recovery`' -> ('Catalog', 'group san_recovery')."""
    return tuple(step.strip().replace("`", "") for step in text.split("→"))


def documented_paths() -> dict[tuple[str, ...], list[str]]:
    """Every path the docs give, with where each is written (file:line)."""
    paths: dict[tuple[str, ...], list[str]] = {}
    for doc in doc_files():
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for match in _PATH.finditer(line):
                where = f"{doc.relative_to(ROOT)}:{number}"
                paths.setdefault(steps_of(match.group(2)), []).append(where)
    return paths
