"""Docker for the deploy tests: is there an engine, the base image where no registry is reachable,
the project's image built from deploy/Dockerfile, and a stand-in for Docker Hub's postgres:15."""

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from batch_pipeline_tests.processes import ROOT

IMAGE = "batch-pipeline:test"
# Where no registry is reachable, a base image from Debian's packages (bookworm: Python 3.11.2).
LOCAL_BASE = "local/python:3.11"


DEPLOY = ROOT / "deploy"


def deploy_file(name: str):
    """A file of deploy/, read as the tools read it."""
    return yaml.safe_load((DEPLOY / name).read_text())


def launcher_env_vars() -> list[str]:
    """The variables deploy/dagster.compose.yaml's run launcher passes on to each run."""
    return deploy_file("dagster.compose.yaml")["run_launcher"]["config"]["env_vars"]


def docker(*args, check=True, timeout=600, input_text=None):
    return subprocess.run(
        ["docker", *args],
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
        input=input_text,
    )


def remove_run_containers(instance) -> None:
    """Remove the containers of the runs in this Dagster instance (the Docker run launcher labels
    each with its run id), and no one else's: the deploy test modules run side by side, each
    with runs of the same image."""
    for run in instance.get_runs():
        for container in docker(
            "ps", "-aq", "--filter", f"label=dagster/run_id={run.run_id}", check=False
        ).stdout.split():
            docker("rm", "-f", container, check=False)


def docker_engine() -> str | None:
    """Why Docker is unusable here, or None."""
    if shutil.which("docker") is None:
        return "no docker command on this machine"
    try:
        info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "the Docker engine does not answer `docker info` within 60 s"
    return (
        None if info.returncode == 0 else f"no Docker engine answers: {info.stderr.strip()[:200]}"
    )


def base_image(tmp_path) -> str:
    """BATCH_PIPELINE_BASE_IMAGE, else an already imported local base, else one made now."""
    if os.environ.get("BATCH_PIPELINE_BASE_IMAGE"):
        return os.environ["BATCH_PIPELINE_BASE_IMAGE"]
    if docker("image", "inspect", LOCAL_BASE, check=False).returncode == 0:
        return LOCAL_BASE
    if shutil.which("debootstrap") is None:
        pytest.skip("no base image: set BATCH_PIPELINE_BASE_IMAGE or install debootstrap")
    rootfs = tmp_path / "rootfs"
    subprocess.run(
        [
            "debootstrap",
            "--variant=minbase",
            "--include=python3,python3-venv,ca-certificates",
            "bookworm",
            str(rootfs),
        ],
        check=True,
        capture_output=True,
        timeout=900,
    )
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    subprocess.run(
        ["docker", "import", "-", LOCAL_BASE],
        stdin=tar.stdout,
        check=True,
        capture_output=True,
        timeout=600,
    )
    tar.wait(timeout=60)
    return LOCAL_BASE


@contextmanager
def exclusive(name: str):
    """One process at a time (pytest-xdist runs the deploy test modules side by side)."""
    with open(Path(tempfile.gettempdir()) / f"batch_pipeline_{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build_image(tmp_path) -> None:
    """deploy/Dockerfile as IMAGE, from a fresh wheelhouse: once per test run (the deploy test
    modules may run side by side, on different pytest-xdist workers), one build at a time."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or str(os.getppid())
    built = Path(tempfile.gettempdir()) / f"batch_pipeline_image_built_{run}"
    with exclusive("image"):
        if built.exists() and image_id(IMAGE) == built.read_text():
            return
        _build_image(tmp_path)
        built.write_text(image_id(IMAGE) or "")


def built_image(tmp_path) -> str:
    """IMAGE, built for this test run; the test is skipped, saying why, where Docker is truly
    absent."""
    if (why := docker_engine()) is not None:
        pytest.skip(why)
    build_image(tmp_path)
    return IMAGE


def image_id(name: str) -> str | None:
    found = docker("image", "inspect", "-f", "{{.Id}}", name, check=False)
    return found.stdout.strip() if found.returncode == 0 else None


def _build_image(tmp_path) -> None:
    before = image_id(IMAGE)
    wheels = ROOT / "deploy" / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "-w",
            str(wheels),
            f"{ROOT}[deploy]",
            "async-timeout",
        ],
        check=True,
        capture_output=True,
        timeout=900,
    )
    docker(
        "build",
        "--network",
        "host",
        "-f",
        "deploy/Dockerfile",
        "--build-arg",
        f"BASE_IMAGE={base_image(tmp_path)}",
        "-t",
        IMAGE,
        str(ROOT),
        timeout=900,
    )
    if before and before != image_id(IMAGE):  # the previous build, now untagged
        docker("rmi", before, check=False)


POSTGRES_IMAGE = "postgres:15"  # the compose file's
POSTGRES_STANDIN = ROOT / "batch_pipeline_tests" / "deploy" / "postgres_image"


def postgres_image(tmp_path) -> str:
    """What `postgres:15` is here: Docker Hub's if it is present, else the stand-in
    (postgres_image/, Debian's PostgreSQL 15 with the official image's interface) tagged so;
    which one, in words."""
    with exclusive("postgres_image"):
        present = docker("image", "inspect", POSTGRES_IMAGE, check=False).returncode == 0
        labels = (
            docker("image", "inspect", "-f", "{{json .Config.Labels}}", POSTGRES_IMAGE).stdout
            if present
            else ""
        )
        if present and "batch_pipeline.standin" not in labels:
            return "Docker Hub's postgres:15 (present on this machine)"
        docker(
            "build",
            "--network",
            "host",
            "--build-arg",
            f"BASE_IMAGE={base_image(tmp_path)}",
            "--label",
            "batch_pipeline.standin=postgres",
            "-t",
            POSTGRES_IMAGE,
            str(POSTGRES_STANDIN),
            timeout=900,
        )
        return "a stand-in for postgres:15 (no registry reachable): " + str(
            POSTGRES_STANDIN.relative_to(ROOT)
        )
