"""`python -m san_sandbox`: init, load, work and age from the shell."""

from sqlalchemy import func, select

from batch_pipeline.san.database import create_san_engine
from batch_pipeline.san.tables import COMPLETED, PENDING, jobs, scraps
from san_sandbox.__main__ import main


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
