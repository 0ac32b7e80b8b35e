"""The Kubernetes objects deploy/ describes, read two ways: the kustomization's files and the
Helm chart rendered by Helm's own engine (helm-python-sdk binds Helm's Go SDK; no cluster)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S = DEPLOY / "kubernetes"
CHART = DEPLOY / "helm" / "costguard"

Key = tuple[str, str]


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML mapping with a key twice is an error (kubectl refuses it; PyYAML keeps the last)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)  # type: ignore[no-untyped-call]
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                 _construct_mapping)


def load_all(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.load_all(text, Loader=_UniqueKeyLoader) if d]


@dataclass(frozen=True)
class Manifests:
    source: str
    docs: dict[Key, dict[str, Any]]

    def __getitem__(self, key: Key) -> dict[str, Any]:
        return self.docs[key]

    @property
    def daemon(self) -> dict[str, Any]:
        return self.docs[("Deployment", "costguard")]

    @property
    def agent(self) -> dict[str, Any]:
        return self.docs[("DaemonSet", "costguard-agent")]

    @property
    def service(self) -> dict[str, Any]:
        return self.docs[("Service", "costguard")]

    def kinds(self) -> set[str]:
        return {kind for kind, _ in self.docs}


def _index(source: str, docs: list[dict[str, Any]]) -> Manifests:
    out: dict[Key, dict[str, Any]] = {}
    for doc in docs:
        key = (doc["kind"], doc["metadata"]["name"])
        assert key not in out, f"{source}: {key} twice"
        out[key] = doc
    return Manifests(source, out)


@functools.cache
def kustomize() -> Manifests:
    docs = [d for p in sorted(K8S.glob("*.yaml")) for d in load_all(p.read_text())
            if d.get("kind") != "Kustomization"]
    return _index("kustomize", docs)


# what a production install sets: a shared PostgreSQL, two replicas, the Prometheus Operator
PRODUCTION = {
    "replicaCount": 2,
    "secrets": {
        "databaseUrl": "postgresql://costguard:CHANGE-ME@postgres.costguard.svc:5432/costguard",
        "agentToken": "CHANGE-ME",
    },
    "serviceMonitor": {"enabled": True},
}


def render_chart(values: dict[str, Any] | None = None, *,
                 release: str = "costguard", namespace: str = "costguard") -> dict[str, str]:
    """Template path -> rendered text, as `helm template RELEASE deploy/helm/costguard`."""
    import helm_python

    helm_python.disable_logging()
    chart = helm_python.Chart.load(CHART)
    rendered: dict[str, str] = chart.render(values, name=release, namespace=namespace,
                                            is_install=True)
    return rendered


def helm(values: dict[str, Any] | None = None, **kw: str) -> Manifests:
    rendered = render_chart(values, **kw)
    docs = [d for path, text in sorted(rendered.items()) if not path.endswith("NOTES.txt")
            for d in load_all(text)]
    return _index("helm", docs)


@functools.cache
def helm_production() -> Manifests:
    return helm(PRODUCTION)
