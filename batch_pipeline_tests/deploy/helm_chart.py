"""What Dagster's Helm chart (1.13) renders from deploy/helm/values.yaml for a run, and that
run's pod in Docker as Kubernetes would run it. No cluster and no `helm` here: each function
below renders what one template of the chart renders (named beside it, read from
dagster-io/dagster's helm/dagster), and the run's Job itself is built by dagster-k8s's own
K8sRunLauncher, with only the Kubernetes API call captured.
"""

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from dagster import DagsterInstance
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster._core.instance.ref import InstanceRef
from dagster._core.launcher import LaunchRunContext

from batch_pipeline.definitions import defs

RELEASE = NAMESPACE = "dagster"
FULLNAME = "dagster"  # dagster.fullname: the release's name when it holds the chart's
USER_CHART_FULLNAME = "dagster-dagster-user-deployments"  # the sub-chart's, by the same rule
# The chart's values.yaml: `global:` defaults every template falls back on.
CHART_GLOBAL = {
    "dagsterHome": "/opt/dagster/dagster_home",
    "postgresqlSecretName": "dagster-postgresql-secret",
    "serviceAccountName": "",
}
PG_PASSWORD_KEY = "postgresql-password"  # the key the chart's templates read the secret by
SAN_SECRET = "batch-pipeline-san"  # the values' envSecrets (README of values.yaml)


def chart_global(values: dict) -> dict:
    return {**CHART_GLOBAL, **(values.get("global") or {})}


def _names(refs) -> list[str]:
    return [ref["name"] for ref in refs or [] if "name" in ref]


def run_launcher_config(values: dict) -> dict:
    """templates/helpers/instance/_run-launcher.tpl, `dagsterYaml.runLauncher.k8s`."""
    k8s = values["runLauncher"]["config"]["k8sRunLauncher"]
    home = chart_global(values)
    config = {
        "load_incluster_config": k8s.get("loadInclusterConfig", True),
        "job_namespace": k8s.get("jobNamespace") or NAMESPACE,
        "image_pull_policy": k8s.get("imagePullPolicy"),
        # dagster.serviceAccountName: global, else serviceAccount.name, else the fullname
        "service_account_name": home["serviceAccountName"] or FULLNAME,
        "dagster_home": home["dagsterHome"],
        "instance_config_map": f"{FULLNAME}-instance",
        "postgres_password_secret": home["postgresqlSecretName"],
    }
    optional = {
        "env_config_maps": _names(k8s.get("envConfigMaps")) or None,
        "env_secrets": _names(k8s.get("envSecrets")) or None,
        "env_vars": k8s.get("envVars") or None,
        "volume_mounts": k8s.get("volumeMounts") or None,
        "volumes": k8s.get("volumes") or None,
        "labels": k8s.get("labels") or None,
        "resources": k8s.get("resources") or None,
        "security_context": k8s.get("securityContext") or None,
    }
    config.update({key: value for key, value in optional.items() if value})
    run_k8s = k8s.get("runK8sConfig") or {}
    renamed = {
        "containerConfig": "container_config",
        "podSpecConfig": "pod_spec_config",
        "podTemplateSpecMetadata": "pod_template_spec_metadata",
        "jobSpecConfig": "job_spec_config",
        "jobMetadata": "job_metadata",
    }
    if run_k8s:
        config["run_k8s_config"] = {renamed[key]: value for key, value in run_k8s.items()}
    return config


def user_env_config_map(deployment: dict) -> str:
    """configmap-env-user.yaml: a deployment's `env` (a mapping) as a ConfigMap of this name."""
    return f"{USER_CHART_FULLNAME}-{deployment['name']}-user-env"


def user_deployment_container_context(values: dict, deployment: dict) -> dict | None:
    """The sub-chart's helpers/_helpers.tpl, `dagsterUserDeployments.k8sContainerContext`: what
    includeConfigInLaunchedRuns gives each run (DAGSTER_CONTAINER_CONTEXT of the code server;
    none when it is disabled, deployment-user.yaml). The 1.13 template also renders
    `run_k8s_config.pod_spec_config.automount_service_account_token: true`, and the location's
    context is merged over the run launcher's: it wins over the launcher's `runK8sConfig`."""
    if not (deployment.get("includeConfigInLaunchedRuns") or {"enabled": True})["enabled"]:
        return None
    home = chart_global(values)
    service_account = home["serviceAccountName"] or f"{USER_CHART_FULLNAME}-user-deployments"
    k8s = {
        "image_pull_policy": deployment["image"]["pullPolicy"],
        "env_config_maps": [
            user_env_config_map(deployment),
            *_names(deployment.get("envConfigMaps")),
        ],
        "namespace": NAMESPACE,
        "service_account_name": service_account,
    }
    for key, name in (
        ("volumeMounts", "volume_mounts"),
        ("volumes", "volumes"),
        ("labels", "labels"),
        ("resources", "resources"),
    ):
        if deployment.get(key):
            k8s[name] = deployment[key]
    if deployment.get("envSecrets"):
        k8s["env_secrets"] = _names(deployment["envSecrets"])
    if isinstance(deployment.get("env"), list):
        k8s["env"] = deployment["env"]
    pod_spec_config: dict = {"automount_service_account_token": True}
    for key, name in (("sidecarContainers", "containers"), ("initContainers", "init_containers")):
        if deployment.get(key):
            pod_spec_config[name] = deployment[key]
    k8s["run_k8s_config"] = {"pod_spec_config": pod_spec_config}
    return {"k8s": k8s}


def user_deployment_shared_env(values: dict) -> dict:
    """The sub-chart's `dagsterUserDeployments.sharedEnv`: the code server's DAGSTER_HOME."""
    return {
        "DAGSTER_HOME": chart_global(values)["dagsterHome"],
        "DAGSTER_K8S_PIPELINE_RUN_NAMESPACE": NAMESPACE,
        "DAGSTER_K8S_PIPELINE_RUN_ENV_CONFIGMAP": f"{FULLNAME}-pipeline-env",
    }


def instance_yaml(values: dict, storage: dict) -> dict:
    """configmap-instance.yaml, the parts a run reads (storage, compute logs, telemetry), with
    Dagster's PostgreSQL at `storage` (DAGSTER_PG_* of the test's database)."""
    postgres = {
        "postgres_db": {
            "hostname": storage["DAGSTER_PG_HOST"],
            "port": int(storage["DAGSTER_PG_PORT"]),
            "username": storage["DAGSTER_PG_USER"],
            "password": {"env": "DAGSTER_PG_PASSWORD"},
            "db_name": storage["DAGSTER_PG_DB"],
        }
    }
    rendered = {
        "run_storage": {"module": "dagster_postgres.run_storage", "class": "PostgresRunStorage",
                        "config": postgres},
        "event_log_storage": {"module": "dagster_postgres.event_log",
                              "class": "PostgresEventLogStorage", "config": postgres},
        "schedule_storage": {"module": "dagster_postgres.schedule_storage",
                             "class": "PostgresScheduleStorage", "config": postgres},
        "telemetry": {"enabled": values.get("telemetry", {}).get("enabled", True)},
    }  # fmt: skip
    compute_logs = (values.get("computeLogManager") or {}).get("type", "LocalComputeLogManager")
    if compute_logs == "NoOpComputeLogManager":  # helpers/instance/_compute-log-manager.tpl
        rendered["compute_logs"] = {
            "module": "dagster._core.storage.noop_compute_log_manager",
            "class": "NoOpComputeLogManager",
        }
    return rendered


class CapturedBatchApi:
    """The Kubernetes batch API, as far as launching a Job goes: it keeps the Job."""

    def __init__(self):
        self.jobs = []

    def create_namespaced_job(self, body, namespace, **_):
        self.jobs.append((namespace, body))


KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "none", "cluster": {"server": "https://127.0.0.1:1"}}],
    "users": [{"name": "none", "user": {"token": "none"}}],
    "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}],
    "current-context": "none",
}


@dataclass
class RenderedRun:
    instance: DagsterInstance
    run_id: str
    job: dict  # the V1Job as the API server would receive it (camelCase)
    config_maps: dict[str, dict] = field(default_factory=dict)


def launch_run_job(values: dict, storage: dict, image: str, run_config: dict, tmp: Path):
    """recovery_job launched by dagster-k8s's K8sRunLauncher configured as the chart renders
    it, from a code location whose container context is the user deployment's: the run in
    Dagster's storage, and the Job the launcher sent to Kubernetes."""
    from dagster_k8s import K8sRunLauncher
    from kubernetes.client import ApiClient

    config_dir = tmp / "instance"
    config_dir.mkdir()
    (config_dir / "dagster.yaml").write_text(yaml.safe_dump(instance_yaml(values, storage)))
    launcher_config = run_launcher_config(values)
    # The daemon's instance: its home is the launcher's (the chart sets both from dagsterHome).
    instance = DagsterInstance.from_ref(
        InstanceRef.from_dir(launcher_config["dagster_home"], config_dir=str(config_dir))
    )
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(KUBECONFIG))
    batch_api = CapturedBatchApi()
    launcher = K8sRunLauncher(
        **{**launcher_config, "load_incluster_config": False, "kubeconfig_file": str(kubeconfig)},
        k8s_client_batch_api=batch_api,
    )
    launcher.register_instance(instance)
    [deployment] = values["dagster-user-deployments"]["deployments"]
    repository = ReconstructableRepository.for_module(
        "batch_pipeline.definitions",
        "defs",
        working_directory=None,
        container_image=image,
        container_context=user_deployment_container_context(values, deployment),
    )
    origin = repository.get_reconstructable_job("recovery_job").get_python_origin()
    origin = origin._replace(
        repository_origin=origin.repository_origin._replace(executable_path="/opt/venv/bin/python")
    )
    run = instance.create_run_for_job(
        job_def=defs.resolve_job_def("recovery_job"), run_config=run_config, job_code_origin=origin
    )
    launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=None))
    [(namespace, job)] = batch_api.jobs
    assert namespace == launcher_config["job_namespace"]
    env = deployment.get("env")
    config_maps = {user_env_config_map(deployment): env if isinstance(env, dict) else {}}
    return RenderedRun(
        instance, run.run_id, ApiClient().sanitize_for_serialization(job), config_maps
    )


class PodRefused(Exception):
    """What the kubelet or the API server would refuse, and why."""


def image_user(image: str) -> str:
    return subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Config.User}}", image],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def effective_user(pod: dict, container: dict, image_user: str) -> str | None:
    """--user for Docker (None: the image's own, `image_user`), refusing what the kubelet
    refuses: runAsNonRoot with a root user, or with an image user it cannot verify (a name,
    not a number)."""
    pod_security = pod.get("securityContext") or {}
    security = {**pod_security, **(container.get("securityContext") or {})}
    uid, gid = security.get("runAsUser"), security.get("runAsGroup")
    non_root = bool(security.get("runAsNonRoot"))
    if uid is None:
        user = image_user.split(":")[0]
        if non_root and (not user.isdigit() or user == "0"):
            raise PodRefused(f"runAsNonRoot and the image's user {user or 'root'!r} (not numeric)")
        return None
    if non_root and uid == 0:
        raise PodRefused("runAsNonRoot with runAsUser 0")
    return f"{uid}:{gid}" if gid is not None else str(uid)


def resolved_env(container: dict, config_maps: dict, secrets: dict) -> dict[str, str]:
    """envFrom first, then env (which wins), as the kubelet builds a container's environment."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        if "configMapRef" in source:
            env.update(config_maps.get(source["configMapRef"]["name"], {}))
        elif "secretRef" in source:
            env.update(secrets[source["secretRef"]["name"]])
    for item in container.get("env") or []:
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = secrets[ref["name"]][ref["key"]]
    return env


def config_map_file(config_maps: dict, volume: dict, mount: dict, files: Path | None) -> str:
    """A configMap volume's key mounted with `subPath`, as a read-only bind of a file written
    under `files`."""
    if files is None or "subPath" not in mount:
        raise PodRefused(f"volume {mount['name']}: a configMap is modelled by subPath only")
    name = volume["configMap"]["name"]
    path = files / name / mount["subPath"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config_maps[name][mount["subPath"]])
    path.chmod(0o644)
    return f"type=bind,source={path},destination={mount['mountPath']},readonly"


def docker_run_command(
    job: dict,
    config_maps: dict,
    secrets: dict,
    extra_mounts: list[str],
    name: str,
    files: Path | None = None,
) -> list[str]:
    """`docker run` for the Job's one container, as the kubelet would start it: its user and
    security context, its environment, its volumes (emptyDir as tmpfs, a configMap's key as a
    file written under `files`), its args, its memory limit; the host's network (this
    machine's Docker has no bridge)."""
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    user = effective_user(pod, container, image_user(container["image"]))
    security = container.get("securityContext") or {}
    command = ["docker", "run", "--name", name, "--network", "host"]
    if user:
        command += ["--user", user]
    if (pod.get("securityContext") or {}).get("fsGroup") is not None:
        command += ["--group-add", str(pod["securityContext"]["fsGroup"])]
    if security.get("readOnlyRootFilesystem"):
        command.append("--read-only")
    if security.get("allowPrivilegeEscalation") is False:
        command += ["--security-opt", "no-new-privileges"]
    for capability in (security.get("capabilities") or {}).get("drop") or []:
        command += ["--cap-drop", capability]
    volumes = {volume["name"]: volume for volume in pod.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            command += ["--mount", config_map_file(config_maps, volume, mount, files)]
        elif "emptyDir" in volume:
            command += ["--mount", f"type=tmpfs,destination={mount['mountPath']},tmpfs-mode=1777"]
        else:
            raise PodRefused(f"volume {mount['name']}: only emptyDir and configMap are modelled")
    for mount in extra_mounts:
        command += ["--mount", mount]
    limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    if limit:
        command += ["--memory", limit.replace("Gi", "g").replace("Mi", "m")]
    for key, value in resolved_env(container, config_maps, secrets).items():
        command += ["--env", f"{key}={value}"]
    command.append(container["image"])
    return command + list(container.get("command") or []) + list(container.get("args") or [])
