"""The Helm values' pods as Kubernetes would run them, without a cluster.

A run: dagster-k8s's own K8sRunLauncher, configured exactly as the chart renders it from
deploy/helm/values.yaml (helm_chart.py names each template), launches recovery_job from a code
location whose container context is the user deployment's (includeConfigInLaunchedRuns); the
Job it sends to Kubernetes is captured and its one container run in Docker with the pod's user,
security context, environment, volumes and args, against a SAN database with a ghost job. The
run must succeed and heal. The instance's dagster.yaml is also mounted read-only at the
launcher's home, as the chart mounts it into the webserver, daemon and migrate pods (subPath:
a root-owned directory when the image has none there): dagster-k8s 0.29 does not mount it into
run pods, and the run must not depend on whether it does. On the values before this test
(`dagsterHome` the chart's default, no security context) the run failed: the image had no
such home, the mount made it root-owned, and the default IO manager could not write
`$DAGSTER_HOME/storage`.

The code server: its container, as the sub-chart's deployment-user.yaml runs it, serves and
answers the probe command the chart gives it. The webserver and the daemon run Dagster's own
image, which Docker Hub would give and this machine cannot reach: their values are checked
against Pod Security's restricted profile, not run.
"""

import subprocess
import uuid

import pytest
import yaml
from dagster import AssetKey, DagsterRunStatus
from sqlalchemy import URL, create_engine, text

from batch_pipeline.recovery.assets import recovery_run_config
from batch_pipeline.san.tables import CARD_ANALYSIS, FAILED, PENDING
from batch_pipeline_tests.deploy.docker import IMAGE, built_image, docker
from batch_pipeline_tests.deploy.helm_chart import (
    PG_PASSWORD_KEY,
    SAN_SECRET,
    PodRefused,
    chart_global,
    docker_run_command,
    effective_user,
    launch_run_job,
    run_launcher_config,
    user_deployment_shared_env,
    user_env_config_map,
)
from batch_pipeline_tests.processes import ROOT, code_server_serves, free_port
from san_sandbox.processes import wait_for

VALUES = ROOT / "deploy" / "helm" / "values.yaml"


def values() -> dict:
    return yaml.safe_load(VALUES.read_text())


def restricted_violations(pod: dict, containers: list[dict]) -> list[str]:
    """Pod Security Standards, "restricted" (kubernetes.io/docs/concepts/security/
    pod-security-standards): what a namespace labelled so refuses."""
    pod_security = pod.get("securityContext") or {}
    found = []
    for container in containers:
        security = {**pod_security, **(container.get("securityContext") or {})}
        name = container.get("name", "container")
        if security.get("runAsNonRoot") is not True:
            found.append(f"{name}: runAsNonRoot is not true")
        if security.get("runAsUser") == 0:
            found.append(f"{name}: runAsUser 0")
        if (container.get("securityContext") or {}).get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation is not false")
        dropped = ((container.get("securityContext") or {}).get("capabilities") or {}).get("drop")
        if "ALL" not in (dropped or []):
            found.append(f"{name}: capabilities do not drop ALL")
        if (security.get("seccompProfile") or {}).get("type") not in (
            "RuntimeDefault",
            "Localhost",
        ):
            found.append(f"{name}: no RuntimeDefault seccomp profile")
    return found


def test_the_webserver_daemon_and_code_server_pods_are_restricted_and_bind_no_low_port():
    """The chart puts each component's podSecurityContext on its pod and securityContext on its
    container (deployment-webserver.yaml, deployment-daemon.yaml, deployment-user.yaml) and
    has the webserver listen on its Service's port (`containerPort: service.port`)."""
    shipped = values()
    [deployment] = shipped["dagster-user-deployments"]["deployments"]
    components = {
        "webserver": shipped["dagsterWebserver"],
        "daemon": shipped["dagsterDaemon"],
        "code server": deployment,
    }
    found = [
        f"{component}: {violation}"
        for component, part in components.items()
        for violation in restricted_violations(
            {"securityContext": part.get("podSecurityContext")},
            [{"name": component, "securityContext": part.get("securityContext")}],
        )
    ]
    assert found == []
    assert shipped["dagsterWebserver"]["service"]["port"] >= 1024  # no root needed to bind it
    # its probe asks the port it listens on (the template names it `http`)
    assert shipped["dagsterWebserver"]["readinessProbe"]["httpGet"]["port"] == "http"
    for part in components.values():  # requests: a busy node cannot starve them
        assert part["resources"]["requests"]["cpu"] and part["resources"]["requests"]["memory"]
    assert deployment["livenessProbe"] and deployment["startupProbe"]["enabled"] is True
    assert shipped["dagsterDaemon"]["livenessProbe"]["failureThreshold"] > 1
    assert shipped["migrate"]["enabled"] is False  # deploy/helm/migrate.yaml instead
    # every init container of the webserver's, the read-only webserver's and the daemon's pods
    for part in (shipped["dagsterWebserver"], shipped["dagsterDaemon"]):
        requests = part["initContainerResources"]["requests"]
        assert requests["cpu"] and requests["memory"]
    assert deployment["env"]["SAN_DAGSTER_BASE_URL"].startswith("https://")
    assert shipped["dagster-user-deployments"]["rbacEnabled"] is False


@pytest.fixture
def rendered(tmp_path, pg_db, dagster_pg_storage):
    """recovery_job's Job as dagster-k8s builds it from the shipped values, and a ghost job."""
    ghost = pg_db.job(
        CARD_ANALYSIS, pg_db.scrap(pg_db.user()), PENDING, created_at=pg_db.ago(hours=1)
    )
    run = launch_run_job(values(), dagster_pg_storage, IMAGE, recovery_run_config({}), tmp_path)
    yield run, ghost
    run.instance.dispose()


def test_the_run_s_job_is_restricted_mounts_no_token_and_lives_in_the_image_s_home(rendered):
    run, _ = rendered
    pod = run.job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert restricted_violations(pod, [container]) == []
    assert pod["automountServiceAccountToken"] is False  # in process: no Kubernetes API call
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["DAGSTER_HOME"] == "/opt/dagster/home" == chart_global(values())["dagsterHome"]
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "DAGSTER_HOME=/opt/dagster/home" in dockerfile
    assert container["resources"]["limits"]["memory"] == "2Gi"  # the deployment's, for runs
    mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
    assert mounts == {"/opt/dagster/home/storage", "/tmp"}  # the only writable places


def test_the_kubelet_s_non_root_check_is_modelled():
    """runAsNonRoot without runAsUser: the kubelet must verify the image's user, which it can
    only do for a number; the image's is numeric (deploy/Dockerfile `USER 10001:10001`)."""
    with pytest.raises(PodRefused, match="not numeric"):
        effective_user({"securityContext": {"runAsNonRoot": True}}, {}, "dagster")
    with pytest.raises(PodRefused, match="runAsUser 0"):
        effective_user({"securityContext": {"runAsNonRoot": True, "runAsUser": 0}}, {}, "10001")
    assert effective_user({"securityContext": {"runAsNonRoot": True}}, {}, "10001:10001") is None


@pytest.mark.system
@pytest.mark.timeout(1800)
def test_a_run_pod_as_kubernetes_would_run_it_succeeds_and_heals(
    rendered, pg_db, dagster_pg_storage, tmp_path
):
    built_image(tmp_path)
    run, ghost = rendered
    instance_file = tmp_path / "instance" / "dagster.yaml"
    instance_file.chmod(0o644)
    home = run_launcher_config(values())["dagster_home"]
    secrets = {
        SAN_SECRET: {"SAN_DATABASE_URL": pg_db.url},
        chart_global(values())["postgresqlSecretName"]: {
            PG_PASSWORD_KEY: dagster_pg_storage["DAGSTER_PG_PASSWORD"]
        },
    }
    name = f"bp-run-pod-{uuid.uuid4().hex[:8]}"
    command = docker_run_command(
        run.job,
        run.config_maps,
        secrets,
        [f"type=bind,source={instance_file},destination={home}/dagster.yaml,readonly"],
        name,
    )
    try:
        finished = subprocess.run(command, capture_output=True, text=True, timeout=900)
    finally:
        docker("rm", "-f", name, check=False)
    dagster_run = run.instance.get_run_by_id(run.run_id)
    assert dagster_run.status == DagsterRunStatus.SUCCESS, finished.stderr[-4000:]
    assert finished.returncode == 0
    assert pg_db.get_job(ghost).status == FAILED  # healed: closed and enqueued again
    event = run.instance.get_latest_materialization_event(AssetKey("ghost_job_recovery"))
    assert event is not None and event.run_id == run.run_id


@pytest.mark.system
@pytest.mark.timeout(900)
def test_the_code_server_container_serves_and_answers_its_probe(tmp_path, pg_db):
    """deployment-user.yaml: `dagster code-server start -h 0.0.0.0 -p PORT <codeServerArgs>`,
    the shared env (DAGSTER_HOME), the deployment's env ConfigMap and secrets, its security
    contexts and volumes; then the probe's own command, `dagster api grpc-health-check`, run
    in the container as the kubelet runs an exec probe."""
    built_image(tmp_path)
    shipped = values()
    [deployment] = shipped["dagster-user-deployments"]["deployments"]
    port = free_port()  # the host's network: the values' 4000 may be taken here
    pod = {
        "securityContext": deployment["podSecurityContext"],
        "volumes": deployment["volumes"],
        "containers": [
            {
                "name": "dagster-user-deployments",
                "image": IMAGE,
                "securityContext": deployment["securityContext"],
                "args": ["dagster", "code-server", "start", "-h", "0.0.0.0", "-p", str(port),
                         *deployment["codeServerArgs"]],
                "envFrom": [{"configMapRef": {"name": "shared"}},
                            {"configMapRef": {"name": user_env_config_map(deployment)}},
                            *({"secretRef": ref} for ref in deployment["envSecrets"])],
                "volumeMounts": deployment["volumeMounts"],
                "resources": deployment["resources"],
            }
        ],
    }  # fmt: skip
    config_maps = {
        "shared": user_deployment_shared_env(shipped),
        user_env_config_map(deployment): deployment["env"],
    }
    name = f"bp-code-server-pod-{uuid.uuid4().hex[:8]}"
    command = docker_run_command(
        {"spec": {"template": {"spec": pod}}},
        config_maps,
        {SAN_SECRET: {"SAN_DATABASE_URL": pg_db.url}},
        [],
        name,
    )
    started = subprocess.run([command[0], command[1], "-d", *command[2:]], capture_output=True)
    try:
        assert started.returncode == 0, started.stderr
        wait_for(lambda: code_server_serves(port), 240, "the code server pod to serve", every_s=3)
        probe = docker("exec", name, "dagster", "api", "grpc-health-check", "-p", str(port),
                       check=False)  # fmt: skip
        assert probe.returncode == 0, probe.stdout + probe.stderr
        user = docker("exec", name, "id", "-u").stdout.strip()
        assert user == "10001"
    finally:
        docker("rm", "-f", name, check=False)


@pytest.mark.system
@pytest.mark.timeout(900)
def test_the_migrate_job_creates_dagster_s_schema_on_an_empty_database(tmp_path):
    """deploy/helm/migrate.yaml's Job, run as the kubelet would (its user, read-only root, the
    ConfigMap's dagster.yaml at the image's home) against an empty database: Dagster's schema is
    there afterwards, and a second run (the same Job applied on an upgrade) changes nothing."""
    from batch_pipeline_tests.conftest import pg_admin_url
    from batch_pipeline_tests.processes import dagster_storage_database

    built_image(tmp_path)
    config_map, job = yaml.safe_load_all((ROOT / "deploy" / "helm" / "migrate.yaml").read_text())
    [container] = job["spec"]["template"]["spec"]["containers"]
    container["image"] = IMAGE
    with dagster_storage_database(pg_admin_url()) as storage:
        instance = yaml.safe_load(config_map["data"]["dagster.yaml"])
        instance["storage"]["postgres"]["postgres_db"].update(
            hostname=storage["DAGSTER_PG_HOST"],
            port=int(storage["DAGSTER_PG_PORT"]),
            username=storage["DAGSTER_PG_USER"],
            db_name=storage["DAGSTER_PG_DB"],
        )
        config_maps = {config_map["metadata"]["name"]: {"dagster.yaml": yaml.safe_dump(instance)}}
        secrets = {"dagster-postgresql-secret": {PG_PASSWORD_KEY: storage["DAGSTER_PG_PASSWORD"]}}
        for attempt in ("first", "again"):
            name = f"bp-migrate-{attempt}-{uuid.uuid4().hex[:8]}"
            command = docker_run_command(job, config_maps, secrets, [], name, tmp_path / "files")
            try:
                finished = subprocess.run(command, capture_output=True, text=True, timeout=600)
            finally:
                docker("rm", "-f", name, check=False)
            assert finished.returncode == 0, finished.stdout[-2000:] + finished.stderr[-2000:]
        database = create_engine(
            URL.create(
                "postgresql+psycopg",
                username=storage["DAGSTER_PG_USER"],
                host=storage["DAGSTER_PG_HOST"],
                port=int(storage["DAGSTER_PG_PORT"]),
                database=storage["DAGSTER_PG_DB"],
            )
        )
        try:
            with database.connect() as conn:  # the runs table, and the schema's version stamped
                assert conn.execute(text("SELECT count(*) FROM runs")).scalar() == 0
                assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        finally:
            database.dispose()
