"""deploy/helm/values.yaml against the fields Dagster's official chart allows.

The allowed keys and types below are read off the chart's values schema,
helm/dagster/values.schema.json in dagster-io/dagster (commit bdb8547f), whose
dagster-user-deployments entries are the UserDeployment definition the sub-chart's
charts/dagster-user-deployments/values.schema.json generates from the same model. Where that
schema points at a Kubernetes definition (resources, env sources, probes...), the value is an
open object, as the issue allows. An unknown key in an object the chart closes
(additionalProperties: false), or a wrong type, fails the test: `helm upgrade` would refuse it.
"""

from pathlib import Path

import yaml

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
