"""Posting an alert to a Slack incoming webhook (SAN_ALERT_WEBHOOK_URL); logged when unset."""

import json
import logging
import os
import urllib.request
from pathlib import Path

from batch_pipeline.san.settings import Setting

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "http://127.0.0.1:3000"
SAN_ALERT_WEBHOOK_URL = Setting(
    "SAN_ALERT_WEBHOOK_URL",
    "unset: alerts are only logged",
    "Slack incoming webhook for failed runs and failed asset checks",
    secret=True,
)
SAN_DAGSTER_BASE_URL = Setting(
    "SAN_DAGSTER_BASE_URL", DEFAULT_BASE_URL, "the UI's address, for the run links in alerts"
)


# `make run` records the address it serves the UI on in its DAGSTER_HOME, so that `explain`
# started from another shell links to that port.
UI_ADDRESS_FILE = "ui_address"


def recorded_ui_address() -> str | None:
    """The address `make run` recorded in DAGSTER_HOME, if any."""
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        return None
    try:
        return (Path(home) / UI_ADDRESS_FILE).read_text().strip() or None
    except OSError:
        return None


def base_url() -> str:
    """The UI's address: SAN_DAGSTER_BASE_URL, else the one `make run` recorded, else :3000."""
    return (SAN_DAGSTER_BASE_URL.raw() or recorded_ui_address() or DEFAULT_BASE_URL).rstrip("/")


def run_link(run_id: str) -> str:
    base = base_url()
    return f"{base}/runs/{run_id}"


# The code location's name in workspace.yaml and deploy/workspace.yaml (the UI's sensor paths).
CODE_LOCATION = "batch_pipeline"


def sensor_link(name: str) -> str:
    return f"{base_url()}/locations/{CODE_LOCATION}/sensors/{name}"


def post_alert(text: str, webhook_url: str | None = None, timeout_s: float = 10.0) -> bool:
    """Post `text` to the webhook; True when Slack accepted it. Never raises: an alert that
    cannot be delivered is logged, it must not fail the sensor that raised it."""
    url = webhook_url if webhook_url is not None else SAN_ALERT_WEBHOOK_URL.raw()
    if not url:
        log.warning("SAN_ALERT_WEBHOOK_URL is not set; alert not posted: %s", text)
        return False
    request = urllib.request.Request(
        url,
        data=json.dumps({"text": text}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return 200 <= response.status < 300
    except Exception as error:
        log.warning("could not post the alert to the webhook (%s): %s", error, text)
        return False
