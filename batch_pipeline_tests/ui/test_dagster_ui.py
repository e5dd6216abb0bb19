"""The Dagster UI as SAN's engineers use it, in a real browser (Playwright driving Debian's
Chromium at /usr/bin/chromium), against `dagster dev` on the embedded default.

Screenshots of every step are saved in test-artifacts/ui/.
"""

import re
import signal
import subprocess
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import requests
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.scheduler.instigation import InstigatorStatus, InstigatorType
from playwright.sync_api import expect, sync_playwright
from sqlalchemy import insert

from batch_pipeline.recovery.plan import MAX_ATTEMPTS
from batch_pipeline.recovery.summary import HEALED_TAG
from batch_pipeline.san.database import create_san_engine, utc_now
from batch_pipeline.san.tables import CARD_ANALYSIS, FAILED, PENDING, jobs, scraps
from batch_pipeline.til.partitions import PARTITION_TAG, partition_set_name
from batch_pipeline_tests.processes import (
    free_port,
    launch_through_webserver,
    run_home,
    sandbox_env,
    sandbox_ui,
    serving,
)
from batch_pipeline_tests.ui.paths import LAUNCHES, SIDEBAR, documented_paths
from san_sandbox.processes import start_group, stop_group, wait_for

pytestmark = pytest.mark.system  # drives the UI in a browser

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "ui"
CHROMIUM = "/usr/bin/chromium"
# The left navigation's width at the test's 1440-pixel viewport.
NAVIGATION_WIDTH = 240
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@pytest.fixture(scope="module")
def dagster_dev(tmp_path_factory):
    """The UI as `make run` starts it (./dagster.yaml, the embedded SAN database), but still:
    without the living sandbox, so each step knows exactly what the database holds."""
    tmp = tmp_path_factory.mktemp("dagster_dev")
    home = run_home(tmp)
    env = sandbox_env(tmp / "data", DAGSTER_HOME=str(home))
    port = free_port()
    log = open(tmp / "dagster_dev.log", "w")

    process = start_group(
        sandbox_ui(port, "--still"),
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"

    try:
        wait_for(lambda: serving(base), 120, "dagster dev to serve the UI")
        yield base, home, tmp / "data" / "san.sqlite"
    finally:
        stop_group(process, signal.SIGTERM, grace_s=20)
        log.close()


@pytest.fixture(scope="module")
def page(dagster_dev):
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} is missing: `make test` installs Debian's chromium "
            "(scripts/install-chromium)"
        )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.set_default_timeout(60_000)
        yield page
        browser.close()


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def instance_at(home) -> DagsterInstance:
    return DagsterInstance.from_config(str(home))


def schedule_status(home, name: str):
    with instance_at(home) as instance:
        states = [
            s
            for s in instance.all_instigator_state(instigator_type=InstigatorType.SCHEDULE)
            if s.name == name
        ]
        return states[0].status if states else None


def runs_of(home, job_name: str):
    with instance_at(home) as instance:
        return instance.get_runs(RunsFilter(job_name=job_name))


def test_1_schedules_are_listed_with_cron_and_time_zone(dagster_dev, page):
    base, _, _ = dagster_dev
    page.goto(f"{base}/automation")
    expect(page.get_by_text("recovery_schedule", exact=True)).to_be_visible()
    expect(page.get_by_text("til_auto_generation_schedule", exact=True)).to_be_visible()
    expect(page.get_by_text("At 03:00 AM GMT+9")).to_be_visible()
    # every schedule names its zone, the recovery's too (its cron names times of day)
    expect(page.get_by_text(re.compile(r"every 2 hours.*GMT\+9"))).to_be_visible()
    shot(page, "1_automation")
    page.goto(f"{base}/locations/batch_pipeline/schedules/recovery_schedule")
    expect(page.get_by_text("(0 0-22/2 * * *)")).to_be_visible()
    # The schedule's own time-zone cell (its description names the zone too).
    expect(page.get_by_role("cell", name="Asia/Seoul", exact=True)).to_be_visible()
    shot(page, "1_recovery_schedule")


def test_2_switching_the_recovery_schedule_off_and_on(dagster_dev, page):
    base, home, _ = dagster_dev
    page.goto(f"{base}/locations/batch_pipeline/schedules/recovery_schedule")
    switch = page.locator("input[type=checkbox]").first
    toggle = page.locator("label", has=switch).first  # the visible switch around the hidden input
    expect(switch).to_be_checked()
    toggle.click()
    wait_for(
        lambda: schedule_status(home, "recovery_schedule") == InstigatorStatus.STOPPED,
        60,
        "the schedule to stop",
    )
    expect(switch).not_to_be_checked()
    shot(page, "2_schedule_off")
    toggle.click()
    wait_for(
        lambda: schedule_status(home, "recovery_schedule") == InstigatorStatus.RUNNING,
        60,
        "the schedule to run",
    )
    expect(switch).to_be_checked()


def open_from_the_sidebar(base, page, section: str, name: str) -> None:
    """What the README says: the sidebar's section, then the name in its list."""
    page.goto(base)
    page.get_by_text(section, exact=True).first.click()
    page.get_by_text(name, exact=True).first.click()


def open_the_launchpad_of_an_asset_job(base, page, job: str, button: str):
    """The README's directions: Jobs -> the job, the arrow beside its materialize button
    (*Materialize all* for several assets, *Materialize* for one) -> Open launchpad (an asset
    job has no Launchpad tab of its own); the launchpad's dialog."""
    open_from_the_sidebar(base, page, "Jobs", job)
    page.locator(f"button:right-of(:text-is('{button}'))").first.click()
    page.get_by_role("menuitem", name="Open launchpad").click()
    return page.get_by_role("dialog")


def launch_recovery_run(base, home, page, done_before: int) -> None:
    """recovery_job's launchpad -> Materialize, with its default config."""
    dialog = open_the_launchpad_of_an_asset_job(base, page, "recovery_job", "Materialize all")
    expect(dialog.get_by_text("Launchpad (configure assets)")).to_be_visible()
    expect(dialog.get_by_text("stale_pending_after_minutes: 30")).to_be_visible()
    shot(page, "3_recovery_launchpad")
    dialog.get_by_role("button", name="Materialize").click()
    wait_for(
        lambda: (
            len([r for r in runs_of(home, "recovery_job") if r.status == DagsterRunStatus.SUCCESS])
            > done_before
        ),
        240,
        "the recovery run to succeed",
    )


def reading_order(locator) -> tuple[float, float]:
    """Where a chip is on the screen, as a reader meets it: line (to the pixel), then column."""
    box = locator.bounding_box()
    return (round(box["y"]), box["x"])


def test_3_launching_recovery_job_from_the_ui(dagster_dev, page):
    base, home, _ = dagster_dev
    launch_recovery_run(base, home, page, 0)
    page.goto(f"{base}/runs")
    expect(page.get_by_text("recovery_job").first).to_be_visible()
    expect(page.get_by_text("Success").first).to_be_visible()
    # the run list tells what the run healed, in its `Healed` tag, the row's first chip
    [run] = runs_of(home, "recovery_job")
    healed_chip = page.get_by_text(f"{HEALED_TAG}: {run.tags[HEALED_TAG]}").first
    expect(healed_chip).to_be_visible()
    wrote_chip = page.get_by_text("batch_pipeline/wrote.").first
    expect(wrote_chip).to_be_visible()
    assert reading_order(healed_chip) < reading_order(wrote_chip)
    shot(page, "3_runs")


def test_4_the_ghost_recovery_asset_shows_ids_counts_and_a_point_per_run(dagster_dev, page):
    base, home, san_sqlite = dagster_dev
    # A new ghost in the embedded SAN database, then a second run: two points on the plots.
    engine = create_san_engine(f"sqlite:///{san_sqlite}")
    with engine.begin() as conn:
        ghost = conn.execute(
            insert(jobs)
            .values(
                job_type=CARD_ANALYSIS,
                target_id=6,
                status=PENDING,  # a healthy scrap: it gets a new job
                created_at=utc_now() - timedelta(hours=1),
                updated_at=utc_now() - timedelta(hours=1),
            )
            .returning(jobs.c.id)
        ).scalar_one()
    engine.dispose()
    launch_recovery_run(base, home, page, 1)
    with instance_at(home) as instance:
        records = instance.fetch_materializations(AssetKey("ghost_job_recovery"), limit=10).records
    assert len(records) == 2
    latest = records[0].asset_materialization.metadata
    assert [pair["failed_job_id"] for pair in latest["recovered"].value] == [ghost]

    open_from_the_sidebar(base, page, "Catalog", "ghost_job_recovery")  # the README's path
    page.get_by_role("tab", name="Events").click()
    # the materialization opens with the sentence, then the healed ids as a table
    expect(page.get_by_text("Healed 1 ghost job (jobs PENDING > 30 min").first).to_be_visible()
    table = page.locator("table", has_text="failed_job_id").first
    expect(table).to_be_visible()
    expect(table.get_by_text("stale in PENDING > 30 min").first).to_be_visible()
    expect(page.get_by_text("enqueued").first).to_be_visible()
    shot(page, "4_ghost_job_recovery_events")
    # Overview -> Metadata -> Plots: one chart per numeric metadata key, a point per run.
    page.goto(f"{base}/assets/ghost_job_recovery?view=overview")
    # a real asset, not an external one: Materialize works, the schedule is its automation, and
    # the checks were evaluated in the run that materialized it
    expect(page.get_by_role("button", name="Materialize").first).to_be_enabled()
    expect(page.get_by_text("Latest check results")).to_be_visible()
    expect(page.get_by_text("At 0 minutes past the hour, every 2 hours")).to_be_visible()
    page.get_by_role("button", name="Plots").click()
    # detected, enqueued, exhausted, deferred, skipped_by_race, announce_failures, and the time
    # the healed ghosts had waited: heal_age_median_seconds, heal_age_max_seconds
    expect(page.locator("canvas")).to_have_count(8)
    page.get_by_text("detected", exact=True).scroll_into_view_if_needed()
    shot(page, "4_ghost_job_recovery_plots")


def test_5_a_backfill_of_two_til_days_from_the_ui(dagster_dev, page):
    base, home, _ = dagster_dev
    yesterday = (datetime.now(ZoneInfo("Asia/Seoul")) - timedelta(days=1)).date()
    days = [str(yesterday - timedelta(days=1)), str(yesterday)]
    open_from_the_sidebar(base, page, "Jobs", "til_auto_generation_job")  # the README's path
    page.get_by_role("tab", name="Partitions").click()
    page.get_by_role("button", name="Materialize…").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("button", name="Custom").click()
    partitions = dialog.locator("input[type='text']").first  # the partition keys, typed
    partitions.fill(", ".join(days))
    partitions.press("Enter")
    expect(dialog.get_by_text("2 partitions", exact=True)).to_be_visible()
    shot(page, "5_backfill_dialog")
    dialog.get_by_role("button", name="Launch backfill").click()

    def materialized():
        with instance_at(home) as instance:
            records = instance.fetch_materializations(
                AssetKey("til_auto_generation"), limit=50
            ).records
        return {r.partition_key for r in records} >= set(days)

    wait_for(materialized, 300, "both TIL partitions to be materialized")
    # A day launched as an API caller may launch it (the demo did): `dagster/partition` alone.
    api_day = str(yesterday - timedelta(days=2))
    run_id, status = launch_through_webserver(
        int(base.rsplit(":", 1)[1]),
        "til_auto_generation_job",
        {},
        tags={PARTITION_TAG: api_day},
    )
    assert status == "SUCCESS"
    statuses = partition_statuses(base, "til_auto_generation_job")
    assert {day: statuses.get(day) for day in [*days, api_day]} == dict.fromkeys(
        [*days, api_day], "SUCCESS"
    )
    # ... and what the job's Partitions tab shows (an asset job's: the asset's partitions)
    assert all(materialized_in(base, "til_auto_generation", day) for day in [*days, api_day])
    page.goto(f"{base}/locations/batch_pipeline/jobs/til_auto_generation_job/partitions")
    expect(page.get_by_text("Backfill history")).to_be_visible()
    total = page.get_by_text("Total partitions").locator("xpath=..")
    expect(total).not_to_have_text("0Total partitions")  # the counts have loaded
    shot(page, "5_til_partitions")


def materialized_in(base: str, asset: str, day: str) -> bool:
    """Whether the webserver shows `day` of a daily-partitioned asset as materialized (green)."""
    query = """query($key: AssetKeyInput!) { assetNodeOrError(assetKey: $key) {
      ... on AssetNode { assetPartitionStatuses {
        ... on TimePartitionStatuses { ranges { startKey endKey status } } } } } }"""
    answer = requests.post(
        f"{base}/graphql",
        json={"query": query, "variables": {"key": {"path": [asset]}}},
        timeout=60,
    ).json()
    ranges = answer["data"]["assetNodeOrError"]["assetPartitionStatuses"]["ranges"]
    return any(
        r["status"] == "MATERIALIZED" and r["startKey"] <= day <= r["endKey"] for r in ranges
    )


def partition_statuses(base: str, job: str) -> dict[str, str]:
    """What the job's Partitions tab shows: each partition's run status, from the webserver."""
    query = """query($selector: RepositorySelector!, $name: String!) {
      partitionSetOrError(repositorySelector: $selector, partitionSetName: $name) {
        ... on PartitionSet { partitionStatusesOrError {
          ... on PartitionStatuses { results { partitionName runStatus } } } } } }"""
    answer = requests.post(
        f"{base}/graphql",
        json={
            "query": query,
            "variables": {
                "selector": {
                    "repositoryName": "__repository__",
                    "repositoryLocationName": "batch_pipeline",
                },
                "name": partition_set_name(job),
            },
        },
        timeout=60,
    ).json()
    results = answer["data"]["partitionSetOrError"]["partitionStatusesOrError"]["results"]
    return {row["partitionName"]: row["runStatus"] for row in results}


def test_6_one_scrap_s_story_from_explain_job_s_launchpad(dagster_dev, page):
    """The README's path for an operator without a shell: Jobs -> explain_job -> Launchpad; the
    run's explain_target step shows the story as Markdown."""
    base, home, _ = dagster_dev
    open_from_the_sidebar(base, page, "Jobs", "explain_job")
    page.get_by_role("tab", name="Launchpad").click()
    page.locator(".CodeMirror").first.click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(
        "ops:\n  explain_target:\n    config:\n      kind: scrap\n      id: 6\n"
    )
    page.get_by_role("button", name="Launch Run").click()
    page.wait_for_url("**/runs/**")
    wait_for(
        lambda: [r for r in runs_of(home, "explain_job") if r.status == DagsterRunStatus.SUCCESS],
        120,
        "the explain run to succeed",
    )
    page.get_by_text("[Show Markdown]").first.click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_text("scrap 6 (user", exact=False)).to_be_visible()
    expect(dialog.get_by_text("Dagster runs that touched it")).to_be_visible()
    shot(page, "6_explain_story")


def test_7_a_dry_run_redrive_of_an_exhausted_scrap_from_redrive_job_s_launchpad(dagster_dev, page):
    """The README's path: Jobs -> redrive_job, the arrow beside Materialize (its one asset) ->
    Open launchpad; a dry run lists the exhausted scrap it would redrive and enqueues nothing."""
    base, home, san_sqlite = dagster_dev
    engine = create_san_engine(f"sqlite:///{san_sqlite}")
    long_ago = utc_now() - timedelta(days=1)
    with engine.begin() as conn:  # a scrap the AI failed on max_attempts times: exhausted
        scrap = conn.execute(
            insert(scraps)
            .values(
                user_id=1,
                original_content="poison",
                refined_content="poison",
                created_at=long_ago,
                updated_at=long_ago,
            )
            .returning(scraps.c.id)
        ).scalar_one()
        conn.execute(
            insert(jobs),
            [
                dict(
                    job_type=CARD_ANALYSIS,
                    target_id=scrap,
                    status=FAILED,
                    error_message="AI 500",
                    created_at=long_ago,
                    updated_at=long_ago,
                )
                for _ in range(MAX_ATTEMPTS)
            ],
        )

    def jobs_of_the_scrap():
        with engine.connect() as conn:
            return len(conn.execute(jobs.select().where(jobs.c.target_id == scrap)).all())

    dialog = open_the_launchpad_of_an_asset_job(base, page, "redrive_job", "Materialize")
    dialog.locator(".CodeMirror").first.click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(
        "ops:\n  redrive:\n    config:\n      area: orphan_scrap_recovery\n"
        f"      target_ids: [{scrap}]\n"
    )
    shot(page, "7_redrive_launchpad")
    dialog.get_by_role("button", name="Materialize").click()
    wait_for(
        lambda: [r for r in runs_of(home, "redrive_job") if r.status == DagsterRunStatus.SUCCESS],
        120,
        "the dry-run redrive to succeed",
    )
    with instance_at(home) as instance:
        observed = instance.fetch_observations(AssetKey("redrive"), limit=1).records
    metadata = observed[0].asset_observation.metadata
    assert metadata["dry_run"].value is True
    assert [pair["target_id"] for pair in metadata["would_redrive"].value] == [scrap]
    assert jobs_of_the_scrap() == MAX_ATTEMPTS  # a dry run: no new job
    engine.dispose()


def step_on(page, label: str):
    """Where a step's label is on the page, right of the left navigation (whose "Overview" is
    not the asset's tab), and whether to press it: a tab, a button or a link by that name; else
    its text, a heading seen on the way (pressing one folds its section)."""
    by_role = [page.get_by_role(role, name=label, exact=True) for role in ("tab", "button", "link")]
    by_text = page.get_by_text(label, exact=True)
    for waited in range(40):
        for candidate in [*by_role, *([by_text] if waited >= 10 else [])]:
            for found in candidate.all():
                box = found.bounding_box()
                if box and box["x"] > NAVIGATION_WIDTH:
                    return found, candidate is not by_text
        page.wait_for_timeout(500)
    return by_text.first, False  # not there: the caller's expect says which path and step


def test_8_every_ui_path_the_docs_give_leads_somewhere(dagster_dev, page):
    """Each path of README.md, README.ko.md and docs/ (ui/paths.py reads them), step by step:
    the sidebar's section, the job, asset or group in its list, then each tab or button, on the
    screen; a path that starts elsewhere starts on an asset's page. Buttons that would launch a
    run are found, not pressed; a dialog a step opens is closed."""
    base, _, _ = dagster_dev
    for steps, where in documented_paths().items():
        if steps[0] in SIDEBAR:
            open_from_the_sidebar(base, page, steps[0], steps[1].removeprefix("group "))
            rest = steps[2:]
        else:
            page.goto(f"{base}/assets/ghost_job_recovery")
            rest = steps
        for label in rest:
            target, pressed = step_on(page, label)
            expect(target, f"{' → '.join(steps)} ({where[0]})").to_be_visible()
            if pressed and label not in LAUNCHES:
                target.click()
        page.keyboard.press("Escape")
    shot(page, "8_last_documented_path")
