"""`python -m batch_pipeline.sandbox`: init, load, work, age and converge from the shell."""

from sqlalchemy import func, select

from batch_pipeline.san.database import create_san_engine
from batch_pipeline.san.tables import COMPLETED, PENDING, jobs, scraps
from batch_pipeline.sandbox.__main__ import main
from batch_pipeline_tests.sandbox.conftest import pg_server_url


def test_init_load_work_and_age_from_the_command_line(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'cli.sqlite'}"
    assert main(["init", "--database-url", url]) == 0
    assert main(["init", "--database-url", url]) == 0
    assert "already a sandbox" in capsys.readouterr().out
    assert (
        main(
            [
                "load",
                "--database-url",
                url,
                "--scraps",
                "20",
                "--users",
                "4",
                "--app-dies",
                "0.5",
                "--seed",
                "1",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "saved 20 scraps" in out
    engine = create_san_engine(url)
    with engine.connect() as conn:
        pending = conn.execute(
            select(func.count()).select_from(jobs).where(jobs.c.status == PENDING)
        ).scalar_one()
        first = conn.execute(select(func.min(scraps.c.created_at))).scalar_one()
    assert 0 < pending < 40

    # polling workers hear only jobs created after they start: the backlog stays, unless asked
    assert main(["work", "--database-url", url, "--workers", "2", "--idle-seconds", "0.5"]) == 0
    assert "'completed': 0" in capsys.readouterr().out
    assert (
        main(
            ["work", "--database-url", url, "--workers", "2", "--idle-seconds", "0.5", "--backlog"]
        )
        == 0
    )
    assert f"'completed': {pending}," in capsys.readouterr().out
    assert main(["age", "--database-url", url, "--hours", "2"]) == 0
    with engine.connect() as conn:
        assert (
            first - conn.execute(select(func.min(scraps.c.created_at))).scalar_one()
        ).total_seconds() == 7200
        assert (
            conn.execute(
                select(func.count()).select_from(jobs).where(jobs.c.status == COMPLETED)
            ).scalar_one()
            == pending
        )
    engine.dispose()


def test_converge_prints_the_table_and_a_summary_line(capsys):
    code = main(
        [
            "converge",
            "--server-url",
            pg_server_url(),
            "--scraps",
            "60",
            "--users",
            "6",
            "--workers",
            "2",
            "--poison",
            "0",
            "--seed",
            "4",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "| cycle | unmet before |" in out
    summary = out.strip().splitlines()[-1]
    assert (
        "converged=True" in summary
        and "healthy_done=60/60" in summary
        and "duplicates=0" in summary
    )
    assert "audit_mismatches=0" in summary and "max_cards_per_scrap=1" in summary
