"""deploy/helm/values.yaml against Dagster's official chart (1.13.27) and the project's own files.

What this proves, and what it does not: no `helm` runs here (no chart repository is reachable),
so the values are checked two ways. (1) Every key must be one the chart's values schema
(helm/dagster/values.schema.json in dagster-io/dagster, and the UserDeployment definition of
its dagster-user-deployments sub-chart) declares, with its type. That is stricter than Helm:
the chart's schema does not close its top level or UserDeployment (no additionalProperties:
false), so Helm itself would take a misspelt key silently, and this test would not. Where the
schema points at a Kubernetes definition (resources, probes, env sources...) the value is an
open mapping. (2) The values that decide the deployment's behaviour are checked against what
the chart's templates render from them (cited beside each test) and against the project's own
files: the location's name, the runs' resources, retention, the daemon's probe, the code
server's command, port and images, the run queue.
"""

from pathlib import Path

import yaml

from batch_pipeline.monitoring.exporter import READ_DEADLINE
from batch_pipeline_tests.deploy.helm_chart import user_env_config_map

VALUES = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "values.yaml"

OPEN = object()  # a Kubernetes definition: any mapping


def keys(**fields):
    return fields


IMAGE = keys(repository=str, tag=(str, int), pullPolicy={"Always", "IfNotPresent", "Never"})
ENV = OPEN  # a mapping of strings or a list of EnvVar
SECRET_REFS = [keys(name=str)]
CONFIG_MAP_REFS = [keys(name=str)]

USER_DEPLOYMENT = keys(
    name=str,
    image=IMAGE,
    dagsterApiGrpcArgs=[str],
    codeServerArgs=[str],
    includeConfigInLaunchedRuns=keys(enabled=bool),
    deploymentNamespace=str,
    port=int,
    env=ENV,
    envConfigMaps=CONFIG_MAP_REFS,
    envSecrets=SECRET_REFS,
    annotations=OPEN,
    nodeSelector=OPEN,
    affinity=OPEN,
    tolerations=list,
    podSecurityContext=OPEN,
    securityContext=OPEN,
    resources=OPEN,
    livenessProbe=OPEN,
    readinessProbe=OPEN,
    startupProbe=OPEN,
    labels=OPEN,
    volumeMounts=list,
    volumes=list,
    schedulerName=str,
    initContainers=list,
    sidecarContainers=list,
)
TAG_LIMIT = keys(key=str, value=(str, keys(applyLimitPerUniqueValue=bool)), limit=int)
SCHEMA = keys(
    dagsterWebserver=keys(
        replicaCount=int,
        image=IMAGE,
        nameOverride=str,
        pathPrefix=str,
        service=keys(type=str, port=int, annotations=OPEN),
        workspace=OPEN,
        env=ENV,
        envConfigMaps=CONFIG_MAP_REFS,
        envSecrets=SECRET_REFS,
        deploymentLabels=OPEN,
        labels=OPEN,
        nodeSelector=OPEN,
        affinity=OPEN,
        tolerations=list,
        podSecurityContext=OPEN,
        securityContext=OPEN,
        resources=OPEN,
        readinessProbe=OPEN,
        livenessProbe=OPEN,
        startupProbe=OPEN,
        annotations=OPEN,
        enableReadOnly=bool,
        dbStatementTimeout=int,
        dbPoolRecycle=int,
        logLevel=str,
        schedulerName=str,
        volumeMounts=list,
        volumes=list,
        initContainerResources=OPEN,
    ),
    **{
        "dagster-user-deployments": keys(
            enabled=bool,
            enableSubchart=bool,
            imagePullSecrets=SECRET_REFS,
            deployments=[USER_DEPLOYMENT],
            # the sub-chart's own values (charts/dagster-user-deployments/values.yaml)
            rbacEnabled=bool,
            serviceAccount=OPEN,
        )
    },
    postgresql=keys(
        image=IMAGE,
        enabled=bool,
        postgresqlHost=str,
        postgresqlUsername=str,
        postgresqlPassword=str,
        postgresqlDatabase=str,
        postgresqlParams=OPEN,
        postgresqlScheme=str,
        service=keys(port=int),
    ),
    generatePostgresqlPasswordSecret=bool,
    generateCeleryConfigSecret=bool,
    rabbitmq=OPEN,
    redis=OPEN,
    flower=OPEN,
    ingress=OPEN,
    imagePullSecrets=SECRET_REFS,
    computeLogManager=OPEN,
    scheduler=OPEN,
    runLauncher=keys(
        type={"CeleryK8sRunLauncher", "K8sRunLauncher", "CustomRunLauncher"},
        config=keys(
            celeryK8sRunLauncher=OPEN,
            customRunLauncher=OPEN,
            k8sRunLauncher=keys(
                image=IMAGE,
                imagePullPolicy={"Always", "IfNotPresent", "Never"},
                jobNamespace=str,
                loadInclusterConfig=bool,
                kubeconfigFile=str,
                envConfigMaps=CONFIG_MAP_REFS,
                envSecrets=SECRET_REFS,
                envVars=[str],
                volumeMounts=list,
                volumes=list,
                labels=OPEN,
                failPodOnRunFailure=bool,
                resources=OPEN,
                schedulerName=str,
                securityContext=OPEN,
                runK8sConfig=OPEN,
            ),
        ),
    ),
    pythonLogs=OPEN,
    dagsterDaemon=keys(
        enabled=bool,
        image=IMAGE,
        heartbeatTolerance=int,
        env=ENV,
        envConfigMaps=CONFIG_MAP_REFS,
        envSecrets=SECRET_REFS,
        deploymentLabels=OPEN,
        labels=OPEN,
        nodeSelector=OPEN,
        affinity=OPEN,
        tolerations=list,
        podSecurityContext=OPEN,
        securityContext=OPEN,
        resources=OPEN,
        livenessProbe=OPEN,
        readinessProbe=OPEN,
        startupProbe=OPEN,
        annotations=OPEN,
        runMonitoring=OPEN,
        runRetries=OPEN,
        sensors=OPEN,
        schedules=OPEN,
        schedulerName=str,
        volumeMounts=list,
        volumes=list,
        initContainerResources=OPEN,
        runCoordinator=keys(
            enabled=bool,
            type={"QueuedRunCoordinator", "CustomRunCoordinator"},
            config=keys(
                customRunCoordinator=OPEN,
                queuedRunCoordinator=keys(
                    maxConcurrentRuns=int,
                    tagConcurrencyLimits=[TAG_LIMIT],
                    dequeueIntervalSeconds=int,
                    dequeueNumWorkers=int,
                    dequeueUseThreads=bool,
                    blockOpConcurrencyLimitedRuns=OPEN,
                ),
            ),
        ),
    ),
    busybox=OPEN,
    migrate=OPEN,
    telemetry=keys(enabled=bool),
    serviceAccount=OPEN,
    **{"global": OPEN},
    retention=OPEN,
    additionalInstanceConfig=OPEN,
)


def problems(value, schema, path="values") -> list[str]:
    if schema is OPEN:
        return [] if isinstance(value, dict) else [f"{path}: expected a mapping"]
    if isinstance(schema, set):
        return [] if value in schema else [f"{path}: {value!r} is not one of {sorted(schema)}"]
    if isinstance(schema, tuple):  # any of
        for option in schema:
            if not problems(value, option, path):
                return []
        return [f"{path}: {value!r} matches none of the allowed forms"]
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [f"{path}: expected a list"]
        if not schema:
            return []
        return [
            p for i, item in enumerate(value) for p in problems(item, schema[0], f"{path}[{i}]")
        ]
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return [f"{path}: expected a mapping"]
        found = [
            f"{path}.{key}: not a field the chart allows" for key in value if key not in schema
        ]
        return found + [
            p
            for key, item in value.items()
            if key in schema
            for p in problems(item, schema[key], f"{path}.{key}")
        ]
    if schema is list:
        return [] if isinstance(value, list) else [f"{path}: expected a list"]
    if schema is int and isinstance(value, bool):
        return [f"{path}: expected an integer"]
    return (
        []
        if isinstance(value, schema)
        else [f"{path}: expected {schema.__name__}, got {type(value).__name__}"]
    )


def test_the_helm_values_use_only_fields_the_chart_allows():
    values = yaml.safe_load(VALUES.read_text())
    assert problems(values, SCHEMA) == []


def test_the_check_catches_a_misspelt_field_and_a_wrong_type():
    values = yaml.safe_load(VALUES.read_text())
    values["dagster-user-deployments"]["deployments"][0]["prot"] = 4000
    values["runLauncher"]["config"]["k8sRunLauncher"]["loadInclusterConfig"] = "yes"
    assert problems(values, SCHEMA) == [
        "values.dagster-user-deployments.deployments[0].prot: not a field the chart allows",
        "values.runLauncher.config.k8sRunLauncher.loadInclusterConfig: expected bool, got str",
    ]


def test_the_helm_values_keep_the_project_s_run_queue_and_keep_services_inside_the_cluster():
    values = yaml.safe_load(VALUES.read_text())
    queue = values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]
    instance = yaml.safe_load((VALUES.parents[1] / "dagster.prod.yaml").read_text())
    assert queue["maxConcurrentRuns"] == instance["concurrency"]["runs"]["max_concurrent_runs"]
    assert (
        queue["tagConcurrencyLimits"] == instance["concurrency"]["runs"]["tag_concurrency_limits"]
    )
    assert values["dagsterDaemon"]["runMonitoring"]["enabled"] is True
    assert values["dagsterWebserver"]["service"]["type"] == "ClusterIP"
    deployment = values["dagster-user-deployments"]["deployments"][0]
    assert deployment["envSecrets"] == [{"name": "batch-pipeline-san"}]  # secrets by name only
    assert "SAN_DATABASE_URL" not in deployment["env"]


def values():
    return yaml.safe_load(VALUES.read_text())


def deployment():
    return values()["dagster-user-deployments"]["deployments"][0]


def test_the_location_keeps_its_name_batch_pipeline():
    """templates/configmap-workspace.yaml: without dagsterWebserver.workspace.servers each
    location is named after its deployment (`location_name: {{ $deployment.name }}`), and a
    deployment's name is a Kubernetes name (no underscore). The webserver and the daemon mount
    that ConfigMap (deployment-daemon.yaml: dagster.workspace.configmapName)."""
    workspace = values()["dagsterWebserver"]["workspace"]
    [server] = workspace["servers"]
    assert workspace["enabled"] is True
    assert server["name"] == "batch_pipeline"
    assert (server["host"], server["port"]) == (deployment()["name"], deployment()["port"])
    args = deployment()["codeServerArgs"]
    assert args[args.index("--location-name") + 1] == "batch_pipeline"
    compose_workspace = yaml.safe_load((VALUES.parents[1] / "workspace.yaml").read_text())
    [entry] = compose_workspace["load_from"]
    assert entry["grpc_server"]["location_name"] == "batch_pipeline"


def test_each_run_gets_the_resources_a_recovery_run_needs():
    """The run launcher's config is the runs' only config: includeConfigInLaunchedRuns is off
    (deployment-user.yaml then renders no DAGSTER_CONTAINER_CONTEXT), because the sub-chart's
    context for launched runs mounts a service-account token that wins over the launcher's
    runK8sConfig. The launcher gives each run the deployment's resources, volumes, secret and
    env ConfigMap (configmap-env-user.yaml's name)."""
    assert deployment()["includeConfigInLaunchedRuns"]["enabled"] is False
    limit = deployment()["resources"]["limits"]["memory"]
    assert limit.endswith("Gi") and float(limit[:-2]) >= 2  # a 20 M-scrap run peaks at ~300 MB
    launcher = values()["runLauncher"]["config"]["k8sRunLauncher"]
    assert launcher["resources"] == deployment()["resources"]
    assert launcher["volumes"] == deployment()["volumes"]
    assert launcher["volumeMounts"] == deployment()["volumeMounts"]
    assert launcher["envSecrets"] == deployment()["envSecrets"]
    assert launcher["envConfigMaps"] == [{"name": user_env_config_map(deployment())}]


def test_tick_history_is_purged_as_on_compose():
    """templates/configmap-instance.yaml renders `retention:` only `if
    .Values.retention.enabled`."""
    retention = values()["retention"]
    compose = yaml.safe_load((VALUES.parents[1] / "dagster.compose.yaml").read_text())
    assert retention["enabled"] is True
    assert (
        retention["schedule"]["purgeAfterDays"]
        == compose["retention"]["schedule"]["purge_after_days"]
    )
    assert (
        retention["sensor"]["purgeAfterDays"] == compose["retention"]["sensor"]["purge_after_days"]
    )


def test_the_daemon_is_probed_with_its_own_liveness_check():
    """templates/deployment-daemon.yaml renders a livenessProbe only `if
    .Values.dagsterDaemon.livenessProbe`, and sets DAGSTER_DAEMON_HEARTBEAT_TOLERANCE from
    heartbeatTolerance, which `dagster-daemon liveness-check` reads."""
    daemon = values()["dagsterDaemon"]
    assert daemon["livenessProbe"]["exec"]["command"] == ["dagster-daemon", "liveness-check"]
    assert daemon["heartbeatTolerance"] < 1800  # Dagster's default would hide a hung daemon
    assert daemon["livenessProbe"]["periodSeconds"] <= daemon["heartbeatTolerance"]


def test_the_code_server_runs_the_image_s_command_and_the_chart_runs_the_code_s_dagster():
    """The chart's images default to the chart's version (`.tag | default $.Chart.Version`):
    pinned to the Dagster the code is built with."""
    import dagster

    args = deployment()["codeServerArgs"]
    assert args[:2] == ["-m", "batch_pipeline.definitions"]
    dockerfile = (VALUES.parents[1] / "Dockerfile").read_text()
    assert f"ARG PORT={deployment()['port']}" in dockerfile
    assert "-m batch_pipeline.definitions --location-name batch_pipeline" in dockerfile
    assert deployment()["image"]["repository"] and deployment()["image"]["pullPolicy"]
    for component in ("dagsterWebserver", "dagsterDaemon"):
        assert values()[component]["image"]["tag"] == dagster.__version__
    assert f"--version {dagster.__version__}" in VALUES.read_text()


def test_only_known_settings_are_set_and_no_secret_in_plain_sight():
    from batch_pipeline.settings import SETTINGS

    by_name = {setting.name: setting for setting in SETTINGS}
    env = deployment()["env"]
    assert set(env) <= set(by_name), set(env) - set(by_name)
    assert [name for name in env if by_name[name].secret] == []
    assert "SAN_DATABASE_URL" not in env


def test_the_metrics_manifest_runs_the_code_server_s_image_with_its_settings_as_non_root():
    """deploy/helm/metrics.yaml, applied beside the chart: the same image and SAN secret as the
    user deployment, the port Prometheus is told of, probes on /metrics that wait for a slow
    reading, non-root."""
    deployment, service, monitor = yaml.safe_load_all((VALUES.parent / "metrics.yaml").read_text())
    user = yaml.safe_load(VALUES.read_text())["dagster-user-deployments"]["deployments"][0]
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    repository, tag = container["image"].rsplit(":", 1)
    assert (repository, tag) == (user["image"]["repository"], user["image"]["tag"])
    assert container["command"][:4] == ["python", "-m", "batch_pipeline", "metrics"]
    assert container["command"][container["command"].index("--port") + 1] == "9464"
    assert [ref["secretRef"]["name"] for ref in container["envFrom"]] == [
        secret["name"] for secret in user["envSecrets"]
    ]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["SAN_TIMEZONE"] == user["env"]["SAN_TIMEZONE"]
    assert "DAGSTER_PG_PASSWORD" in env  # the chart's instance config reads it
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["automountServiceAccountToken"] is False
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/metrics"
        # a slow source is answered as `_up 0` after READ_DEADLINE: not a reason to restart
        assert container[probe]["timeoutSeconds"] > READ_DEADLINE.total_seconds()
    annotations = service["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/port"] == (
        "9464"
    )
    # the alert rules select job="batch_pipeline"
    [endpoint] = monitor["spec"]["endpoints"]
    assert {"targetLabel": "job", "replacement": "batch_pipeline"} in endpoint["relabelings"]


def test_the_migrate_job_runs_before_the_chart_on_the_chart_s_dagster_and_storage():
    """deploy/helm/migrate.yaml in place of the chart's migrate Job: named by the Dagster
    version the values pin (a new version is a new Job), the storage of values' `postgresql`,
    the chart's password secret, no token; the deployment docs apply and wait for it before
    `helm upgrade --install`."""
    shipped = values()
    config_map, job = yaml.safe_load_all((VALUES.parent / "migrate.yaml").read_text())
    version = shipped["dagsterWebserver"]["image"]["tag"]
    assert version == shipped["dagsterDaemon"]["image"]["tag"]
    assert job["metadata"]["name"] == f"batch-pipeline-dagster-migrate-{version.replace('.', '-')}"
    storage = yaml.safe_load(config_map["data"]["dagster.yaml"])["storage"]["postgres"]
    postgresql = shipped["postgresql"]
    assert storage["postgres_db"] == {
        "hostname": postgresql["postgresqlHost"],
        "port": postgresql["service"]["port"],
        "username": postgresql["postgresqlUsername"],
        "password": {"env": "DAGSTER_PG_PASSWORD"},
        "db_name": postgresql["postgresqlDatabase"],
    }
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    user = deployment()["image"]
    assert container["image"] == f"{user['repository']}:{user['tag']}"
    env = {item["name"]: item for item in container["env"]}
    assert env["DAGSTER_HOME"]["value"] == shipped["global"]["dagsterHome"]
    secret = env["DAGSTER_PG_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert secret == {"name": "dagster-postgresql-secret", "key": "postgresql-password"}
    assert pod["automountServiceAccountToken"] is False
    assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]
    assert shipped["migrate"]["enabled"] is False
    steps = (VALUES.parents[2] / "docs" / "deploying.md").read_text()
    apply = steps.index("kubectl -n dagster apply -f deploy/helm/migrate.yaml")
    wait = steps.index(f"job/{job['metadata']['name']}")
    assert apply < wait < steps.index("helm upgrade --install", wait)
