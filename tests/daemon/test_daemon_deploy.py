"""The deployment files keep their promises: non-root, probes on the right paths and ports,
configuration that costguard itself accepts."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from costguard.config import Settings
from costguard.policy.load import parse_policy_text
from tests.daemon.manifests import DEPLOY, K8S, Manifests, helm_production, kustomize


@pytest.fixture(params=["kustomize", "helm"])
def k8s(request: pytest.FixtureRequest) -> Manifests:
    """The same promises hold for `kubectl apply -k` and for the Helm chart's production
    install (PostgreSQL, two replicas, ServiceMonitor on)."""
    return kustomize() if request.param == "kustomize" else helm_production()


def _pod(workload: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = workload["spec"]["template"]["spec"]
    return pod


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_kustomization_lists_every_manifest() -> None:
    # but the ServiceMonitor, opt-in: without the Prometheus Operator's CRD it fails the apply
    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml",
                                                        "servicemonitor.yaml"}
    assert listed == present


def test_long_running_containers_run_as_non_root_without_privileges(k8s: Manifests) -> None:
    for pod in (_pod(k8s.daemon), _pod(k8s.agent)):
        for container in pod["containers"]:
            sc = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
            assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0, container["name"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["readOnlyRootFilesystem"] is True
            assert "ALL" in sc["capabilities"]["drop"]
            assert not sc.get("privileged", False)


def test_the_only_root_step_is_chowning_the_agent_buffer(k8s: Manifests) -> None:
    for workload in (k8s.daemon, k8s.agent):
        for init in _pod(workload).get("initContainers", []):
            sc = init.get("securityContext", {})
            if sc.get("runAsUser") == 0:
                assert init["command"][0] == "chown"
                assert sc["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}


def test_daemon_probes_point_at_healthz_and_readyz_on_the_served_port(k8s: Manifests) -> None:
    container = _pod(k8s.daemon)["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = _env(container)
    assert int(env["COSTGUARD_HTTP__PORT"]) == ports["http"]
    assert env["COSTGUARD_HTTP__HOST"] == "0.0.0.0"  # probes and Service come from outside
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"


def test_service_monitor_and_agents_reach_the_daemon_port(k8s: Manifests) -> None:
    container = _pod(k8s.daemon)["containers"][0]
    port_names = {p["name"] for p in container["ports"]}
    (svc_port,) = k8s.service["spec"]["ports"]
    assert svc_port["targetPort"] in port_names
    labels = _pod_labels(k8s.daemon)
    assert k8s.service["spec"]["selector"].items() <= labels.items()
    monitor = k8s[("ServiceMonitor", "costguard")]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= \
        k8s.service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0] == {**monitor["spec"]["endpoints"][0],
                                               "port": svc_port["name"], "path": "/metrics"}
    url = _pod(k8s.agent)["containers"][0]["args"][1]
    assert re.fullmatch(rf"http://costguard\.costguard\.svc:{svc_port['port']}", url)


def _pod_labels(workload: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
    return labels


def test_agents_run_only_on_gpu_nodes_and_tolerate_their_taint(k8s: Manifests) -> None:
    pod = _pod(k8s.agent)
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in \
        pod["tolerations"]
    resources = pod["containers"][0]["resources"]
    assert "nvidia.com/gpu" not in resources.get("limits", {})  # never takes a workload's GPU
    # on the node's network, to prove its instance with the node's metadata server (IMDSv2's
    # hop limit keeps pods off it; identity is required by default), still resolving the
    # daemon's service name
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"


def test_secrets_come_from_the_secret_and_its_keys_exist(k8s: Manifests) -> None:
    secret = k8s[("Secret", "costguard-secrets")]
    keys = set(secret["stringData"])
    for workload in (k8s.daemon, k8s.agent):
        for container in _pod(workload)["containers"]:
            for value in _env(container).values():
                if isinstance(value, dict) and "secretKeyRef" in value:
                    ref = value["secretKeyRef"]
                    assert ref["name"] == "costguard-secrets" and ref["key"] in keys
    assert all("CHANGE-ME" in v for v in secret["stringData"].values())
    config = k8s[("ConfigMap", "costguard-config")]["data"]["costguard.yaml"]
    assert "token" not in config and "password" not in config


def test_the_configmap_is_configuration_costguard_accepts(k8s: Manifests) -> None:
    data = k8s[("ConfigMap", "costguard-config")]["data"]
    settings = Settings(**yaml.safe_load(data["costguard.yaml"]))
    assert settings.http.port == 8787
    mounted = {i["path"] for v in _pod(k8s.daemon)["volumes"] if "configMap" in v
               for i in v["configMap"]["items"]}
    for key, text in data.items():
        if key != "costguard.yaml":
            assert parse_policy_text(text, key).policies
            assert f"policies/{key}" in mounted
    policy_dir = Path("/etc/costguard/policies")
    assert settings.policy_paths == [policy_dir]


def test_rollouts_leave_the_in_flight_cycle_time_to_finish(k8s: Manifests) -> None:
    pod = _pod(k8s.daemon)
    assert pod["terminationGracePeriodSeconds"] > 25  # daemon.shutdown_grace default
    assert k8s.daemon["spec"]["replicas"] >= 2
    pdb = k8s[("PodDisruptionBudget", "costguard")]
    assert pdb["spec"]["minAvailable"] == 1


def test_the_dockerfile_is_multi_stage_slim_and_non_root() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    froms = re.findall(r"^FROM (\S+)", text, re.M)
    assert len(froms) >= 2 and all("slim" in f for f in froms)
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and users[-1] not in ("root", "0")
    assert "EXPOSE 8787" in text and "/healthz" in text
    assert re.search(r'^CMD \["run"\]', text, re.M)


def test_the_systemd_unit_runs_the_daemon_unprivileged_with_secrets_in_a_file() -> None:
    unit = (DEPLOY / "systemd" / "costguard.service").read_text()
    assert re.search(r"^ExecStart=\S+costguard run$", unit, re.M)
    assert "DynamicUser=yes" in unit and "NoNewPrivileges=yes" in unit
    assert "EnvironmentFile=/etc/costguard/costguard.env" in unit
    assert "TOKEN=" not in unit.split("[Unit]")[1]


def test_irsa_trust_is_limited_to_the_daemon_service_account() -> None:
    trust = json.loads((DEPLOY / "identity" / "aws" / "irsa-trust-policy.json").read_text())
    (statement,) = trust["Statement"]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    sa = kustomize()[("ServiceAccount", "costguard")]
    expected = f"system:serviceaccount:{sa['metadata']['namespace']}:{sa['metadata']['name']}"
    assert expected in statement["Condition"]["StringEquals"].values()
    assert "eks.amazonaws.com/role-arn" in sa["metadata"]["annotations"]
    binding = yaml.safe_load((DEPLOY / "identity" / "gcp" /
                              "workload-identity-binding.yaml").read_text())
    assert binding["spec"]["member"].endswith("[costguard/costguard]")
    for mode in ("readonly", "enforce"):
        assert (DEPLOY / "iam" / "aws" / f"costguard-{mode}.json").exists()


# one port everywhere, a systemd unit whose service user can read what its own instructions
# install, and a compose file that starts costguard with PostgreSQL (#20 item 9)
PORT = 8787  # the daemon's default http.port


def _texts() -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for p in DEPLOY.rglob("*")
            if p.is_file() and (p.suffix in ("", ".yaml", ".yml", ".service", ".md", ".json")
                                or p.name.endswith("Dockerfile"))}


def test_every_address_of_the_daemon_uses_its_port() -> None:
    found = []
    for path, text in _texts().items():
        for host, port in re.findall(r"https?://(costguard[\w.-]*):(\d+)", text):
            found.append((path.name, host, int(port)))
    assert found, "no daemon address found in deploy/"
    assert {port for _, _, port in found} == {PORT}, found


def test_the_systemd_unit_can_read_what_its_instructions_install() -> None:
    unit = (DEPLOY / "systemd" / "costguard.service").read_text()
    assert "DynamicUser=yes" in unit
    # the dynamic user reads the config and policies: they are world-readable, not 0750 root
    assert "install -d -m 0750 /etc/costguard" not in unit
    assert "chmod -R a+rX /etc/costguard" in unit
    # the secrets file is read by systemd itself (as root) before the service starts
    assert "EnvironmentFile=/etc/costguard/costguard.env" in unit
    # the working directory is the state directory: the policies are named absolutely
    paths = re.search(r"^Environment=COSTGUARD_POLICY_PATHS=(.+)$", unit, re.M)
    assert paths is not None and yaml.safe_load(paths.group(1)) == ["/etc/costguard/policies"]
    assert "costguard init /etc/costguard" in unit


def test_compose_starts_costguard_on_its_postgresql() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    pg, cg = services["postgres"], services["costguard"]
    url = urlsplit(cg["environment"]["COSTGUARD_DATABASE_URL"])
    assert url.scheme == "postgresql" and url.hostname == "postgres"
    env = pg["environment"]
    assert (url.username, url.password, url.path.lstrip("/")) == (
        env["POSTGRES_USER"], env["POSTGRES_PASSWORD"], env["POSTGRES_DB"])
    assert cg["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "healthcheck" in pg
    assert (DEPLOY.parent / cg["build"]["context"].replace("..", ".") /
            cg["build"]["dockerfile"]).is_file()
    assert cg["ports"] == [f"127.0.0.1:{PORT}:{PORT}"]
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert f"EXPOSE {PORT}" in dockerfile
    assert "costguard init /etc/costguard" in dockerfile  # the image runs with no mount


def _images(doc: dict[str, Any]) -> list[str]:
    pod = doc.get("spec", {}).get("template", {}).get("spec", {})
    return [c["image"] for c in pod.get("initContainers", []) + pod.get("containers", [])]


def test_every_image_is_one_this_repository_builds_at_this_version(k8s: Manifests) -> None:
    # the two images the Dockerfiles build, at the release's version: never `latest`
    from costguard import __version__

    built = {"ghcr.io/costguard/costguard": "Dockerfile",
             "ghcr.io/costguard/costguard-agent": "agent.Dockerfile"}
    images = [image for doc in k8s.docs.values() for image in _images(doc)]
    assert images
    for image in images:
        name, _, tag = image.rpartition(":")
        assert name in built and tag == __version__, image
        assert (DEPLOY / built[name]).is_file()


def test_the_image_runs_the_daemon_on_jemalloc_as_heap_py_says() -> None:
    from costguard.heap import JEMALLOC_ENV

    text = (DEPLOY / "Dockerfile").read_text()
    final = text.rsplit("\nFROM ", 1)[1]  # the image's own stage, not the build's
    assert re.search(r"apt-get install -y --no-install-recommends libjemalloc2", final)
    env = dict(re.findall(r"(?:ENV|\\\n)\s+([A-Z_]+)=(\S+)", final))
    assert {k: env.get(k) for k in JEMALLOC_ENV} == JEMALLOC_ENV
