"""deploy/helm/costguard: `helm lint --strict` and `helm template` through Helm's own engine
(helm-python-sdk binds Helm's Go SDK), every rendered object checked against the Kubernetes
API's schemas, and the choices a values file makes (SQLite or PostgreSQL, agent, secrets)."""

from __future__ import annotations

from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

import costguard
from costguard.config import Settings
from costguard.policy.load import parse_policy_text
from tests.daemon.manifests import CHART, PRODUCTION, Manifests, helm, kustomize, render_chart

KUBERNETES = "1.29"  # the oldest minor still in the clouds' standard support (EKS, GKE)

VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "production": PRODUCTION,
    "existing-secret": {"secrets": {"existingSecret": "my-costguard"}, "replicaCount": 3,
                        "serviceAccount": {"annotations": {
                            "eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/costguard"}}},
    "no-agent-no-volume": {"agent": {"enabled": False}, "persistence": {"enabled": False}},
    "agent-hooks": {"agent": {"signalHooks": True, "preStopCommand": "/opt/ckpt.sh"}},
    "in-cluster": {"kubernetes": {"inCluster": {
        "enabled": True, "prometheusUrl": "http://prometheus-operated.monitoring:9090",
        "deleteBarePods": True}}},
}


def _lint(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    helm_python.disable_logging()
    report = helm_python.lint(CHART, values, strict=True, kube_version=f"v{KUBERNETES}.0")
    messages: list[dict[str, Any]] = report["messages"]
    return messages


@pytest.mark.parametrize("name", VARIANTS)
def test_helm_lint_strict_finds_nothing(name: str) -> None:
    assert _lint(VARIANTS[name]) == []


@pytest.mark.parametrize("name", VARIANTS)
def test_every_rendered_object_is_valid_for_the_kubernetes_api(name: str) -> None:
    manifests = helm(VARIANTS[name])
    for (kind, obj_name), doc in manifests.docs.items():
        if kind == "ServiceMonitor":  # a CRD: not in the API's own schemas
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            continue
        try:  # strict: an unknown field (a typo in a template) fails too
            kubernetes_validate.validate(doc, KUBERNETES, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name}: {kind}/{obj_name}: {exc.message} at {list(exc.path)}")
        if kind not in ("ClusterRole", "ClusterRoleBinding"):  # cluster-scoped
            assert doc["metadata"]["namespace"] == "costguard"


def test_a_misspelt_value_is_refused_by_lint_with_its_name() -> None:
    messages = _lint({"replicas": 2})
    assert any("replicas" in m["error"] and m["severity"] == 3 for m in messages)
    assert any("pullPolicy" in m["error"] for m in _lint({"image": {"pullPolicy": "Sometimes"}}))


def _render_error(values: dict[str, Any]) -> str:
    with pytest.raises(helm_python.HelmRenderError) as info:
        render_chart(values)
    return str(info.value)


def test_several_replicas_on_sqlite_are_refused_with_the_fix() -> None:
    message = _render_error({"replicaCount": 2})
    assert "shared PostgreSQL" in message and "secrets.databaseUrl" in message


@pytest.mark.parametrize("config,fix", [
    ({"database_url": "postgresql://u:pw@db/x"}, "secrets.databaseUrl"),
    ({"http": {"ingest_token": "t0ken"}}, "secrets.agentToken"),
    ({"console": {"session_secret": "s" * 32}}, "secrets.consoleSessionSecret"),
    ({"console": {"auth": "oidc", "oidc": {"client_secret": "c"}}}, "secrets.oidcClientSecret"),
])
def test_secrets_in_the_configmap_are_refused(config: dict[str, Any], fix: str) -> None:
    assert fix in _render_error({"config": config})


def test_defaults_run_one_replica_on_sqlite_kept_on_a_volume() -> None:
    m = helm()
    daemon = m.daemon
    assert daemon["spec"]["replicas"] == 1
    assert daemon["spec"]["strategy"] == {"type": "Recreate"}  # never two writers on one file
    pod = daemon["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    url = env["COSTGUARD_DATABASE_URL"]["value"]
    mounts = {v["name"]: v["mountPath"] for v in container["volumeMounts"]}
    assert url == f"sqlite:///{mounts['state']}/costguard.db"
    (state,) = [v for v in pod["volumes"] if v["name"] == "state"]
    claim = state["persistentVolumeClaim"]["claimName"]
    pvc = m[("PersistentVolumeClaim", claim)]
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert "PodDisruptionBudget" not in m.kinds()  # one replica: a PDB would block drains
    secret = m[("Secret", "costguard-secrets")]
    assert set(secret["stringData"]) == {"agent-token"}
    assert len(secret["stringData"]["agent-token"]) == 48  # made once, not empty


def test_a_random_agent_token_is_not_the_same_twice() -> None:
    tokens = {helm()[("Secret", "costguard-secrets")]["stringData"]["agent-token"]
              for _ in range(2)}
    assert len(tokens) == 2


def test_an_existing_secret_is_used_and_none_is_written() -> None:
    m = helm(VARIANTS["existing-secret"])
    assert "Secret" not in m.kinds()
    refs = [e["valueFrom"]["secretKeyRef"] for w in (m.daemon, m.agent)
            for c in w["spec"]["template"]["spec"]["initContainers"]
            + w["spec"]["template"]["spec"]["containers"]
            for e in c.get("env", []) if "valueFrom" in e]
    assert refs and {r["name"] for r in refs} == {"my-costguard"}
    assert {r["key"] for r in refs} == {"database-url", "agent-token",
                                        "console-session-secret", "oidc-client-secret"}
    assert all(r.get("optional") for r in refs if r["key"].startswith(("console", "oidc")))
    assert m.daemon["spec"]["replicas"] == 3
    assert m[("ServiceAccount", "costguard")]["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/costguard"}


def test_the_agent_and_the_service_monitor_are_optional() -> None:
    kinds = helm(VARIANTS["no-agent-no-volume"]).kinds()
    assert "DaemonSet" not in kinds and "ServiceMonitor" not in kinds
    assert "PersistentVolumeClaim" not in kinds
    assert {"DaemonSet", "ServiceMonitor"} <= helm(PRODUCTION).kinds()


def test_a_release_of_another_name_points_its_agents_at_its_own_service() -> None:
    m = helm(PRODUCTION, release="gpu-costs", namespace="finops")
    service = m[("Service", "gpu-costs-costguard")]
    (agent,) = [d for (kind, _), d in m.docs.items() if kind == "DaemonSet"]
    url = agent["spec"]["template"]["spec"]["containers"][0]["args"][1]
    assert url == f"http://gpu-costs-costguard.finops.svc:{service['spec']['ports'][0]['port']}"
    pod = agent["spec"]["template"]["spec"]  # the node's metadata server proves the instance
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    pod_labels = m[("Deployment", "gpu-costs-costguard")]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_pre_stop_hooks_get_the_agent_a_command_and_the_right_to_signal() -> None:
    def agent(values: dict[str, Any]) -> dict[str, Any]:
        (daemonset,) = [d for (kind, _), d in helm(values).docs.items() if kind == "DaemonSet"]
        container: dict[str, Any] = daemonset["spec"]["template"]["spec"]["containers"][0]
        return container

    plain = agent({})
    assert "--pre-stop-command" not in plain["args"]
    assert plain["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    hooks = agent({"agent": {"signalHooks": True,
                             "preStopCommand": "/opt/train/checkpoint.sh --now"}})
    assert hooks["args"][2:] == ["--pre-stop-command", "/opt/train/checkpoint.sh --now"]
    assert hooks["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["KILL"]}
    assert hooks["securityContext"]["runAsNonRoot"] is True


def test_policies_and_config_from_values_reach_the_daemon() -> None:
    idle = kustomize()[("ConfigMap", "costguard-config")]["data"]["idle-gpu.yml"]
    text = idle.replace("idle-gpu-shutdown", "my-idle-gpu")
    values = {"config": {"poll_interval": "10m", "policy_paths": ["/etc/costguard/policies"]},
              # Helm merges maps with the chart's defaults: null removes the shipped policy
              "policies": {"mine.yml": text, "idle-gpu.yml": None}}
    m = helm(values)
    data = m[("ConfigMap", "costguard-config")]["data"]
    assert Settings(**yaml.safe_load(data["costguard.yaml"])).poll_interval.total_seconds() == 600
    assert set(data) == {"costguard.yaml", "mine.yml"}
    assert parse_policy_text(data["mine.yml"], "mine.yml").policies[0].name == "my-idle-gpu"
    items = [v for v in m.daemon["spec"]["template"]["spec"]["volumes"] if v["name"] == "config"]
    assert {"key": "mine.yml", "path": "policies/mine.yml"} in items[0]["configMap"]["items"]


def test_a_changed_policy_rolls_the_pods() -> None:
    def checksum(values: dict[str, Any]) -> str:
        annotations = helm(values).daemon["spec"]["template"]["metadata"]["annotations"]
        value: str = annotations["checksum/config"]
        return value

    edited = {"policies": {"idle-gpu.yml": "policies: []\n"}}
    assert checksum({}) == checksum({}) != checksum(edited)


def test_the_default_policy_is_the_kustomization_s_and_images_are_this_release() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == costguard.__version__
    m: Manifests = helm()
    images = {c["image"] for w in (m.daemon, m.agent)
              for c in w["spec"]["template"]["spec"]["containers"]}
    assert images == {f"ghcr.io/costguard/costguard:{costguard.__version__}",
                      f"ghcr.io/costguard/costguard-agent:{costguard.__version__}"}
    chart_policy = m[("ConfigMap", "costguard-config")]["data"]["idle-gpu.yml"]
    kustomize_policy = kustomize()[("ConfigMap", "costguard-config")]["data"]["idle-gpu.yml"]
    assert yaml.safe_load(chart_policy) == yaml.safe_load(kustomize_policy)


def test_the_console_s_secrets_reach_the_daemon_from_the_secret() -> None:
    m = helm({"secrets": {"consoleSessionSecret": "k" * 40, "oidcClientSecret": "cs"},
              "config": {"console": {"auth": "oidc", "admin_group": "finops", "oidc": {
                  "issuer": "https://idp.example.com", "client_id": "costguard"}}}})
    secret = m[("Secret", "costguard-secrets")]["stringData"]
    assert secret["console-session-secret"] == "k" * 40 and secret["oidc-client-secret"] == "cs"
    (container,) = m.daemon["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["COSTGUARD_CONSOLE__SESSION_SECRET"]["valueFrom"]["secretKeyRef"]["key"] == \
        "console-session-secret"
    assert env["COSTGUARD_CONSOLE__OIDC__CLIENT_SECRET"]["valueFrom"]["secretKeyRef"][
        "key"] == "oidc-client-secret"
    # none set: no variable names a key the Secret lacks
    plain = {e["name"] for e in helm().daemon["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert not {n for n in plain if n.startswith("COSTGUARD_CONSOLE")}


def test_the_grafana_dashboard_ships_as_a_configmap_on_request() -> None:
    import json
    from pathlib import Path

    assert "ConfigMap/costguard-dashboard" not in {f"{k}/{n}" for k, n in helm().docs}
    m = helm({"grafanaDashboard": {"enabled": True}})
    board = m[("ConfigMap", "costguard-dashboard")]
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "costguard-cost.json"
    assert json.loads(board["data"]["costguard-cost.json"]) == json.loads(shipped.read_text())


def test_in_cluster_mode_grants_what_costguard_iam_prints_and_configures_the_cluster(
        ) -> None:
    from costguard.k8s import rbac

    values = {"kubernetes": {"inCluster": {
        "enabled": True, "prometheusUrl": "http://prometheus-operated.monitoring:9090"}}}
    m = helm(values)
    role = m[("ClusterRole", "costguard-workloads")]
    assert role["rules"] == rbac.rules(acting=True, deleting_pods=False)
    binding = m[("ClusterRoleBinding", "costguard-workloads")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "costguard",
                                    "namespace": "costguard"}]
    config = Settings(**yaml.safe_load(m[("ConfigMap", "costguard-config")]["data"][
        "costguard.yaml"]))
    (cluster,) = config.kubernetes.clusters
    assert cluster.api is not None and cluster.api.in_cluster
    assert cluster.prometheus_url == "http://prometheus-operated.monitoring:9090"
    deleting = helm({"kubernetes": {"inCluster": {
        "enabled": True, "prometheusUrl": "http://p:9090", "deleteBarePods": True}}})
    assert deleting[("ClusterRole", "costguard-workloads")]["rules"] == rbac.rules(
        acting=True, deleting_pods=True)
    reading = helm({"kubernetes": {"inCluster": {
        "enabled": True, "prometheusUrl": "http://p:9090", "acting": False}}})
    assert reading[("ClusterRole", "costguard-workloads")]["rules"] == rbac.rules(acting=False)
    assert ("ClusterRole", "costguard-workloads") not in helm({}).docs


def test_in_cluster_mode_without_prometheus_is_refused_with_the_fix() -> None:
    with pytest.raises(Exception, match=r"kubernetes\.inCluster\.prometheusUrl is required"):
        helm({"kubernetes": {"inCluster": {"enabled": True}}})
