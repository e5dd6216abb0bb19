"""The shape of the code: the import layers hold and no two modules import each other, however
hidden (inside a function, under TYPE_CHECKING): [tool.importlinter] in pyproject.toml."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_hold():
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


# Dagster wiring is tested through its domain's job: a run of the job exercises its assets, ops,
# config, schedules and sensors together (<domain>/test_jobs.py); every domain's definitions.py
# through the whole code location (test_definitions.py).
WIRING = {"assets", "ops", "jobs", "schedules", "sensors", "config", "definitions"}
# Plain data, used by every suite, with no behaviour of their own to test.
PLAIN_DATA = {
    "san/tables.py",
    "san/limits.py",
    "san/job_source.py",
    "san/config.py",
    "san/memory.py",
}
# Entry points named `__main__`: their tests are named after the command (the product's
# test_main.py; another package's test_cli.py).
COMMANDS = {"batch_pipeline/__main__.py": "test_main.py"}
# Each package and where its tests are: the product, and the sandbox beside it.
TESTED = {"batch_pipeline": "batch_pipeline_tests", "san_sandbox": "batch_pipeline_tests/sandbox"}


def test_the_tests_mirror_the_packages():
    missing = []
    for name, tests_folder in TESTED.items():
        missing += untested_modules(ROOT / name, ROOT / tests_folder)
    assert missing == []


def untested_modules(package: Path, tests: Path) -> list[str]:
    missing = []
    for module in sorted(package.rglob("*.py")):
        relative = module.relative_to(package).as_posix()
        if module.name == "__init__.py" or relative in PLAIN_DATA:
            continue
        folder = module.parent.relative_to(package)
        expected = tests / folder / f"test_{module.stem}.py"
        if f"{package.name}/{relative}" in COMMANDS:
            expected = tests / COMMANDS[f"{package.name}/{relative}"]
        elif module.name == "__main__.py":  # a command: named after it
            expected = tests / folder / "test_cli.py"
        elif module.stem == "definitions":
            expected = tests / "test_definitions.py"
        elif module.stem in WIRING and not expected.exists():
            expected = tests / folder / "test_jobs.py"
        if not expected.exists():
            missing.append(f"{package.name}/{relative}: {expected.relative_to(ROOT)}")
    return missing


def test_no_test_module_imports_another_test_module():
    """Helpers live in a conftest or a helpers module (runs.py, processes.py), not in a test
    module another one imports."""
    offenders = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for path in (ROOT / "batch_pipeline_tests").rglob("*.py")
        for line in path.read_text().splitlines()
        if line.lstrip().startswith("from batch_pipeline_tests.")
        and ".test_" in line.split(" import ")[0]
    ]
    assert offenders == []


def test_the_production_wheel_carries_no_sandbox(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    import zipfile

    [wheel] = tmp_path.glob("batch_pipeline-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "batch_pipeline/definitions.py" in names
    assert [name for name in names if name.startswith("san_sandbox")] == []


# A module says one thing and a function does one step: past these, split by reason.
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def test_no_product_module_or_function_outgrows_one_reason():
    import ast

    too_long = []
    for path in sorted((ROOT / "batch_pipeline").rglob("*.py")):
        source = path.read_text()
        name = path.relative_to(ROOT).as_posix()
        if len(source.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"{name}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    too_long.append(f"{name}: {node.name}() {lines} lines")
    assert too_long == []
