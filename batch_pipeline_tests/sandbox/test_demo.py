"""The embedded default's demo state: a small broken SAN, seeded once, with every fragment the
recoveries heal."""

from sqlalchemy import func, select

from batch_pipeline.san.database import create_san_engine
from batch_pipeline.san.tables import ACTIVE_STATUSES, jobs, scraps
from san_sandbox.app_schema import app_knowledge_cards
from san_sandbox.demo import DEMO_USERS, seed_demo_state


def test_the_demo_state_is_seeded_once_with_ghosts_orphans_and_unrefined_scraps(tmp_path):
    engine = create_san_engine(f"sqlite:///{tmp_path / 'demo.sqlite'}")
    made = seed_demo_state(engine)
    assert made["users"] == DEMO_USERS and made["scraps"] == 30
    assert seed_demo_state(engine) == {}  # already seeded: nothing more
    with engine.connect() as conn:
        active = conn.execute(
            select(func.count()).select_from(jobs).where(jobs.c.status.in_(ACTIVE_STATUSES))
        ).scalar_one()
        unrefined = conn.execute(
            select(func.count()).select_from(scraps).where(scraps.c.refined_content.is_(None))
        ).scalar_one()
    assert active > 0 and unrefined > 0
    engine.dispose()


def test_the_demo_state_gives_every_card_a_title(tmp_path):
    engine = create_san_engine(f"sqlite:///{tmp_path / 'demo.sqlite'}")
    assert seed_demo_state(engine)["cards"] > 0
    with engine.connect() as conn:
        assert None not in conn.execute(select(app_knowledge_cards.c.title)).scalars().all()
    engine.dispose()
