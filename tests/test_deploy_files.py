"""The deployment files under deploy/ parse and hang together (docs/deployment.md).

Nothing is pulled, built or run: every YAML file is loaded, and what would only fail at deploy time is
checked here — every ``HEARTH_*`` variable is a real setting, probes name health routes that exist,
selectors select the pods they are meant to, the kill timeouts leave room for Hearth's own shutdown
bound, pods run as the image's non-root user, the registry files are valid registries.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from hearth.api.health import router as health_router
from hearth.registry.config import RegistrySpec
from hearth.settings import Settings

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
K8S = DEPLOY / "k8s"
SETTINGS = {f"HEARTH_{name.upper()}" for name in Settings.model_fields}
HEALTH_PATHS = {route.path for route in health_router.routes}  # type: ignore[attr-defined]
SHUTDOWN_TIMEOUT_S = Settings.model_fields["shutdown_timeout_s"].default
NON_ROOT_UID = 10001


def _yaml_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml"))


def _k8s_documents() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    return docs


def _of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in _k8s_documents() if d["kind"] == kind]


def _env_names(container: dict[str, Any]) -> set[str]:
    return {e["name"] for e in container.get("env", [])}


def test_there_are_deployment_files_and_every_one_parses() -> None:
    files = _yaml_files()
    assert {p.relative_to(DEPLOY).as_posix() for p in files} >= {
        "docker-compose.yml", "hearth.yaml", "k8s/api.yaml", "k8s/worker.yaml", "k8s/pdb.yaml", "k8s/secret.yaml",
        "k8s/configmap.yaml", "k8s/migrate-job.yaml"}
    for path in files:
        docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        assert docs and all(isinstance(d, dict) for d in docs if d is not None), path


def test_every_kubernetes_document_names_its_kind_and_itself() -> None:
    for doc in _k8s_documents():
        assert {"apiVersion", "kind", "metadata"} <= set(doc), doc
        assert doc["metadata"]["name"] and doc["metadata"]["labels"]["app.kubernetes.io/name"] == "hearth"
    kinds = sorted(d["kind"] for d in _k8s_documents())
    assert kinds == ["ConfigMap", "Deployment", "Deployment", "Job", "PodDisruptionBudget", "PodDisruptionBudget",
                     "Secret", "Service"]


def test_every_hearth_variable_in_the_files_is_a_real_setting() -> None:
    used: set[str] = set()
    for path in [*_yaml_files(), DEPLOY / "Dockerfile"]:
        used |= set(re.findall(r"\bHEARTH_[A-Z0-9_]+", path.read_text(encoding="utf-8")))
    assert used, "no setting named at all"
    assert sorted(used - SETTINGS) == []


def test_deployments_select_their_pods_and_run_them_bounded_and_unprivileged() -> None:
    for dep in _of_kind("Deployment"):
        spec = dep["spec"]
        pod = spec["template"]
        assert spec["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items(), dep["metadata"]["name"]
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        assert pod["spec"]["securityContext"]["runAsUser"] == NON_ROOT_UID
        # the kubelet's SIGKILL comes after Hearth's own shutdown bound (and the preStop pause)
        timeout = _env_value(pod, "HEARTH_SHUTDOWN_TIMEOUT_S", default=SHUTDOWN_TIMEOUT_S)
        pause = _pre_stop_seconds(pod)
        assert pod["spec"]["terminationGracePeriodSeconds"] >= float(timeout) + pause + 5
        for container in pod["spec"]["containers"]:
            assert container["image"]
            assert container["args"][0] in ("serve", "worker")
            assert {"cpu", "memory"} <= set(container["resources"]["requests"])
            assert "memory" in container["resources"]["limits"]
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert {"name": "hearth-secrets"} in [e.get("secretRef") for e in container["envFrom"]]


def _env_value(pod: dict[str, Any], name: str, *, default: Any) -> Any:
    for container in pod["spec"]["containers"]:
        for e in container.get("env", []):
            if e["name"] == name:
                return e["value"]
    return default


def _pre_stop_seconds(pod: dict[str, Any]) -> float:
    for container in pod["spec"]["containers"]:
        command = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
        if command:
            assert command[0] == "sleep"
            return float(command[1])
    return 0.0


def test_the_api_probes_name_health_routes_that_exist() -> None:
    [api] = [d for d in _of_kind("Deployment") if d["spec"]["template"]["spec"]["containers"][0]["args"] == ["serve"]]
    container = api["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["path"] in HEALTH_PATHS
        assert container[probe]["httpGet"]["port"] in [p["name"] for p in container["ports"]]
    assert "HEARTH_EMBEDDED_WORKER" in _env_names(container)  # tasks run in the worker Deployment


def test_the_service_and_the_disruption_budgets_select_existing_pods() -> None:
    pods = [d["spec"]["template"]["metadata"]["labels"] for d in _of_kind("Deployment")]
    [service] = _of_kind("Service")
    assert any(service["spec"]["selector"].items() <= labels.items() for labels in pods)
    [api] = [d for d in _of_kind("Deployment") if service["spec"]["selector"].items()
             <= d["spec"]["template"]["metadata"]["labels"].items()]
    ports = [p["name"] for p in api["spec"]["template"]["spec"]["containers"][0]["ports"]]
    assert all(p["targetPort"] in ports for p in service["spec"]["ports"])
    budgets = _of_kind("PodDisruptionBudget")
    assert len(budgets) == 2
    for pdb in budgets:
        matched = [labels for labels in pods if pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()]
        assert len(matched) == 1, pdb["metadata"]["name"]
        assert "maxUnavailable" in pdb["spec"] or "minAvailable" in pdb["spec"]


def test_the_secret_holds_what_hearth_needs_and_the_configmap_a_valid_registry() -> None:
    [secret] = _of_kind("Secret")
    assert set(secret["stringData"]) == {"HEARTH_DATABASE_URL", "HEARTH_REDIS_URL", "HEARTH_MASTER_KEY",
                                         "HEARTH_ADMIN_TOKEN"}
    assert secret["stringData"]["HEARTH_DATABASE_URL"].startswith("postgresql+asyncpg://")
    [config] = _of_kind("ConfigMap")
    registry = yaml.safe_load(config["data"]["hearth.yaml"])
    RegistrySpec.model_validate(registry)
    assert "api_key" not in config["data"]["hearth.yaml"].replace("# ", "")  # no secrets in a ConfigMap
    [job] = _of_kind("Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["migrate"]


@pytest.mark.parametrize("path", [DEPLOY / "hearth.yaml"])
def test_the_registry_file_is_a_valid_registry_without_secrets(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    spec = RegistrySpec.model_validate(yaml.safe_load(text))
    assert spec.models and all(ep.api_key is None for ep in spec.endpoints)


def test_the_compose_file_runs_postgres_redis_migrate_api_and_workers() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text(encoding="utf-8"))
    services = compose["services"]
    assert set(services) == {"postgres", "redis", "migrate", "api", "worker"}
    for name in ("migrate", "api", "worker"):
        service = services[name]
        assert service["build"]["dockerfile"] == "deploy/Dockerfile"
        assert (DEPLOY / service["build"]["context"] / service["build"]["dockerfile"]).resolve() == (
            DEPLOY / "Dockerfile").resolve()
        env = service["environment"]
        assert env["HEARTH_STATE_BACKEND"] == "redis" and env["HEARTH_DATABASE_URL"].startswith("postgresql+asyncpg")
        assert service["command"][0] == {"migrate": "migrate", "api": "serve", "worker": "worker"}[name]
    assert services["api"]["environment"]["HEARTH_EMBEDDED_WORKER"] == "false"
    assert services["api"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["worker"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert "/readyz" in " ".join(services["api"]["healthcheck"]["test"])
    stop = services["api"]["stop_grace_period"]
    assert stop.endswith("s") and float(stop[:-1]) > SHUTDOWN_TIMEOUT_S
    assert (DEPLOY / services["api"]["volumes"][0].split(":")[0]).exists()


def test_the_dockerfile_installs_hearth_on_python_slim_and_runs_it_as_a_non_root_user() -> None:
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    froms = re.findall(r"^FROM (\S+)", text, re.MULTILINE)
    assert froms and all(re.fullmatch(r"python:3\.1[1-9]-slim", f) for f in froms), froms
    assert re.search(r"pip install [^\n]*\.$", text, re.MULTILINE)
    users = re.findall(r"^USER (\S+)", text, re.MULTILINE)
    assert users and users[-1].split(":")[0] == str(NON_ROOT_UID)
    assert re.search(r'^ENTRYPOINT \["hearth"\]', text, re.MULTILINE)
