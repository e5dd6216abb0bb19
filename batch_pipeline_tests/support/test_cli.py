"""`python -m batch_pipeline explain` and `redrive`: what an operator types, its output, and one
clear line with a non-zero exit for every kind of bad input."""

import json
import shutil

import pytest
from dagster import AssetKey, DagsterInstance, RunsFilter
from sqlalchemy import create_engine, text

from batch_pipeline.__main__ import main
from batch_pipeline.alerts.slack import UI_ADDRESS_FILE
from batch_pipeline.recovery.orphan_scraps import ORPHAN_SCRAPS
from batch_pipeline.san.tables import MAX_ID, PENDING
from batch_pipeline.support import cli
from batch_pipeline.support.touches import REDRIVE_ASSET
from batch_pipeline_tests.conftest import pg_admin_url, san_database
from batch_pipeline_tests.processes import ROOT
from batch_pipeline_tests.runs import run_recovery
from batch_pipeline_tests.support.conftest import exhausted_scrap


@pytest.fixture
def dagster_home(tmp_path, monkeypatch):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


@pytest.fixture
def no_dagster_home(tmp_path, monkeypatch):
    """Neither DAGSTER_HOME nor an instance of `make run` in the checkout."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setattr(cli, "CHECKOUT_DAGSTER_HOME", tmp_path / "no_make_run_here")


def one_error_line_of(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def one_error_line(capsys) -> str:
    return one_error_line_of(capsys.readouterr().err)


def test_explain_prints_the_story_with_the_runs_of_the_instance(san_db, dagster_home, capsys):
    poison, _ = exhausted_scrap(san_db)
    with DagsterInstance.get() as instance:
        recovery, _ = run_recovery(san_db, instance)
    capsys.readouterr()
    assert main(["explain", "scrap", str(poison), "--database-url", san_db.url]) == 0
    out = capsys.readouterr().out
    assert f"scrap {poison} of user" in out and "exhausted: 10 of max_attempts 10" in out
    assert f"/runs/{recovery.run_id}" in out
    assert main(["explain", "scrap", str(poison), "--json", "--database-url", san_db.url]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["run_id"] == recovery.run_id


def test_without_dagster_home_the_story_is_printed_and_the_exit_says_what_is_missing(
    san_db, no_dagster_home, capsys
):
    poison, _ = exhausted_scrap(san_db)
    assert main(["explain", "scrap", str(poison), "--database-url", san_db.url]) == 3
    captured = capsys.readouterr()
    assert "exhausted: 10 of max_attempts 10" in captured.out
    assert captured.err.strip() == (
        "error: DAGSTER_HOME is not set and `make run` has no instance in this checkout (point "
        "DAGSTER_HOME at the instance the UI uses); the story above is from SAN's database only"
    )


def test_explain_from_the_checkout_reads_the_runs_of_make_run_and_links_to_its_port(
    san_db, tmp_path, monkeypatch, capsys
):
    """As the README has it: no DAGSTER_HOME in the shell, `make run PORT=3177` elsewhere."""
    home = tmp_path / ".dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    (home / UI_ADDRESS_FILE).write_text("http://127.0.0.1:3177\n")  # what `make run` records
    monkeypatch.setattr(cli, "CHECKOUT_DAGSTER_HOME", home)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    poison, _ = exhausted_scrap(san_db)
    with DagsterInstance.get() as instance:
        recovery, _ = run_recovery(san_db, instance)
    monkeypatch.delenv("DAGSTER_HOME")
    monkeypatch.delenv("SAN_DAGSTER_BASE_URL", raising=False)
    capsys.readouterr()
    assert main(["explain", "scrap", str(poison), "--database-url", san_db.url]) == 0
    captured = capsys.readouterr()
    assert f"http://127.0.0.1:3177/runs/{recovery.run_id}" in captured.out
    assert captured.err.strip() == f"reading the runs of `make run`'s instance at {home}"


def test_a_story_of_the_embedded_default_says_its_times_move(
    tmp_path, dagster_home, monkeypatch, capsys
):
    with san_database("sqlite", tmp_path) as embedded:
        monkeypatch.setattr(cli, "embedded_database_url", lambda: embedded.url)
        poison, _ = exhausted_scrap(embedded)
        assert main(["explain", "scrap", str(poison), "--database-url", embedded.url]) == 0
        assert capsys.readouterr().out.rstrip().endswith(cli.SANDBOX_CLOCK)
        # and not under a story of another database
        assert main(["explain", "scrap", str(poison), "--database-url", f"{embedded.url}?"]) == 0
        assert cli.SANDBOX_CLOCK not in capsys.readouterr().out


def test_an_instance_whose_database_is_gone_is_named_and_the_story_still_printed(
    pg_db, tmp_path, monkeypatch, capsys, dagster_pg_storage
):
    home = tmp_path / "prod_home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "dagster.prod.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    DagsterInstance.get().dispose()  # its storage exists
    admin = create_engine(pg_admin_url()).execution_options(isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE {dagster_pg_storage['DAGSTER_PG_DB']} WITH (FORCE)"))
    admin.dispose()
    poison, _ = exhausted_scrap(pg_db)
    assert main(["explain", "scrap", str(poison), "--database-url", pg_db.url]) == 3
    captured = capsys.readouterr()
    assert "exhausted: 10 of max_attempts 10" in captured.out
    assert "Dagster instance" in one_error_line_of(captured.err)
    assert dagster_pg_storage["DAGSTER_PG_DB"] in captured.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["scrap", "424242"], "error: no scrap 424242 in SAN's scraps table"),
        (["job", "424242"], "error: no job 424242 in SAN's jobs table"),
    ],
)
def test_an_unknown_id_is_one_line_and_exit_2(san_db, dagster_home, capsys, argv, message):
    assert main(["explain", *argv, "--database-url", san_db.url]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and one_error_line_of(captured.err) == message


def test_an_unknown_kind_or_a_bad_id_is_refused_by_the_parser(capsys):
    too_large = [str(MAX_ID + 1), "99999999999999999999"]  # past BIGINT: no id, no traceback
    for argv in (
        ["explain", "card", "1"],
        ["explain", "scrap", "abc"],
        ["explain", "scrap", "-3"],
        *(
            ["explain", kind, number]
            for kind in ("scrap", "job", "summary")
            for number in too_large
        ),
        *(["redrive", "--area", ORPHAN_SCRAPS.area, "--ids", f"1,{n}"] for n in too_large),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert "invalid choice: 'card'" in last or "is not an id" in last


def test_a_database_without_the_san_tables_is_one_line(tmp_path, dagster_home, capsys):
    url = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    assert main(["explain", "scrap", "1", "--database-url", url]) == 2
    assert "missing" in one_error_line(capsys)


def test_redrive_is_a_dry_run_unless_applied_and_the_run_is_in_the_instance(
    san_db, dagster_home, capsys
):
    poison, _ = exhausted_scrap(san_db)
    base = ["redrive", "--area", ORPHAN_SCRAPS.area, "--database-url", san_db.url]
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "would redrive (dry run: add --apply): 1" in out and f"target {poison}: 10 jobs" in out
    # no filter, no "match every exhausted target"; no run id for a run nobody can look at
    assert f"{ORPHAN_SCRAPS.area}: 1 exhausted targets; would" in out
    assert not [line for line in out.splitlines() if line.startswith("run ")]
    assert san_db.jobs(status=PENDING) == []
    assert main([*base, "--ids", str(poison), "--reason", "AI fix 2.3.1", "--apply"]) == 0
    out = capsys.readouterr().out
    [new_job] = san_db.jobs(status=PENDING)
    assert f"-> new job {new_job.id}" in out
    with DagsterInstance.get() as instance:
        [run] = instance.get_runs(RunsFilter(job_name="redrive_job"), limit=1)
        event = instance.get_latest_materialization_event(AssetKey(REDRIVE_ASSET))
    assert run.tags["batch_pipeline/asked_by"].startswith("cli ")
    metadata = event.asset_materialization.metadata
    assert metadata["reason"].value == "AI fix 2.3.1"
    assert f"/runs/{run.run_id}" in out


def test_a_redrive_matching_nothing_is_one_line_and_makes_no_run(san_db, dagster_home, capsys):
    exhausted_scrap(san_db)
    argv = [
        "redrive",
        "--area",
        ORPHAN_SCRAPS.area,
        "--error-contains",
        "segfault",
        "--apply",
        "--database-url",
        san_db.url,
    ]
    assert main(argv) == 2
    assert one_error_line(capsys) == (
        "error: nothing to redrive: no exhausted target of orphan_scrap_recovery (max_attempts "
        "10) matches error containing 'segfault'"
    )
    with DagsterInstance.get() as instance:
        assert instance.get_runs(RunsFilter(job_name="redrive_job")) == []


def test_a_bad_filter_is_one_line_naming_it(san_db, dagster_home, capsys):
    argv = ["redrive", "--area", ORPHAN_SCRAPS.area, "--database-url", san_db.url]
    assert main([*argv, "--failed-since", "last tuesday"]) == 2
    assert "failed_since='last tuesday' is not an ISO 8601 date" in one_error_line(capsys)
    assert main([*argv, "--limit", "0"]) == 2
    assert one_error_line(capsys).startswith("error: limit: ")


def test_applying_without_an_instance_writes_nothing(san_db, no_dagster_home, capsys):
    exhausted_scrap(san_db)
    argv = ["redrive", "--area", ORPHAN_SCRAPS.area, "--apply", "--database-url", san_db.url]
    assert main(argv) == 3
    assert "a redrive is recorded in the Dagster instance" in one_error_line(capsys)
    assert san_db.jobs(status=PENDING) == []
