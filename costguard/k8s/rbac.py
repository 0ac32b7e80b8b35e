"""The Kubernetes RBAC rules costguard needs in a cluster it governs, as `costguard iam
--provider k8s` prints them and the Helm chart's in-cluster mode grants them: read what a
listing reads; patch only the workloads a `stop` or `start` changes, and only when a policy
acts; delete pods only where a cluster allows bare pods to be deleted."""

from __future__ import annotations

from typing import Any

import yaml

# (API group, resources) read every cycle (k8s/provider.py `_LISTED`, the bare pods' get)
READ: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("", ("namespaces", "nodes", "pods")),
    ("apps", ("deployments", "statefulsets")),
    ("batch", ("jobs", "cronjobs")),
    ("autoscaling", ("horizontalpodautoscalers",)),
    ("kubeflow.org", ("notebooks",)),
)
# patched by stop and start (k8s/stops.py), and annotated by `tag`
PATCH: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("apps", ("deployments", "statefulsets")),
    ("batch", ("jobs", "cronjobs")),
    ("kubeflow.org", ("notebooks",)),
)


def rules(*, acting: bool, deleting_pods: bool = False) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"apiGroups": [group], "resources": list(res), "verbs": ["get", "list"]}
        for group, res in READ]
    if acting:
        out += [{"apiGroups": [group], "resources": list(res), "verbs": ["patch"]}
                for group, res in PATCH]
        if deleting_pods:
            out.append({"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]})
    return out


def cluster_role(name: str, *, acting: bool, deleting_pods: bool = False) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": rules(acting=acting, deleting_pods=deleting_pods)}


def render_cluster_role(name: str = "costguard", *, acting: bool,
                        deleting_pods: bool = False) -> str:
    doc = cluster_role(name, acting=acting, deleting_pods=deleting_pods)
    return yaml.safe_dump(doc, sort_keys=False)
