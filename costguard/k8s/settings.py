"""The `kubernetes:` section: the clusters whose GPU pods costguard reads (docs/kubernetes.md).

    kubernetes:
      clusters:
        - name: ml-prod
          prometheus_url: http://prometheus.monitoring:9090   # scrapes dcgm-exporter + KSM
          bearer_token_file: /var/run/secrets/prometheus-token  # when the API asks for one
          team_label: team                  # a pod label, then a namespace label, says the team
          namespace_teams: {research: research, serving: platform}
          owner_team: platform              # who pays for GPUs no pod requests
          selector: 'cluster="ml-prod"'     # when one Prometheus holds several clusters

Nothing here is a secret except the bearer token, which is read from its file and prints as
`**********`.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from costguard.errors import ConfigError
from costguard.policy.base import Duration, at_least
from costguard.small_files import SECRET_BYTES, read_small_text

# Namespaces a cluster's own machinery runs in: never acted on, whatever a policy says.
# The GPU Operator's and the monitoring stack's namespaces hold the exporters costguard
# reads.
DEFAULT_PROTECTED_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease",
                                "gpu-operator", "nvidia-gpu-operator", "monitoring")
# A label or annotation that marks a pod, a workload or a namespace as never to be touched.
PROTECT_KEY = "costguard.io/protect"
# A label value as a PromQL matcher may quote it: no quote, backslash or newline.
_SELECTOR = re.compile(r'^\s*[A-Za-z_][A-Za-z0-9_]*\s*(=|!=|=~|!~)\s*"[^"\\\n]*"\s*'
                       r'(,\s*[A-Za-z_][A-Za-z0-9_]*\s*(=|!=|=~|!~)\s*"[^"\\\n]*"\s*)*$')
_LABEL_KEY = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CostWeights(_Section):
    """The hourly rates a node's price is split by among its GPUs, cores and memory (only
    their ratios matter). Defaults: OpenCost's (configs/default.json)."""

    gpu: float = Field(default=0.95, gt=0)
    cpu: float = Field(default=0.031611, ge=0)
    memory_gib: float = Field(default=0.004237, ge=0)


class ApiSettings(_Section):
    """How costguard reaches the cluster's API server, to read workloads and act on them:
    a kubeconfig file (and context), or the pod's own ServiceAccount (`in_cluster: true`,
    the Helm chart's in-cluster mode)."""

    kubeconfig: Path | None = None
    context: str | None = None
    in_cluster: bool = False

    @model_validator(mode="after")
    def _one_way(self) -> ApiSettings:
        if self.in_cluster == (self.kubeconfig is not None):
            raise ValueError("give kubeconfig (a file, and optionally its context) or "
                             "in_cluster: true, not both and not neither")
        if self.in_cluster and self.context is not None:
            raise ValueError("context names a kubeconfig context; drop it with in_cluster")
        return self


class JupyterHubSettings(_Section):
    """The JupyterHub whose single-user servers run in the cluster (KubeSpawner): costguard
    stops an idle one through the hub's REST API, as the hub's own idle culler does. The
    token needs the `servers` scope (admin:servers on JupyterHub 2 and later)."""

    url: str = Field(pattern=r"^https?://[^\s]+$",
                     description="The hub's API, e.g. http://hub.jhub:8081/hub/api")
    token_file: Path

    def token(self) -> SecretStr:
        try:
            text = read_small_text(self.token_file, SECRET_BYTES).strip()
        except UnicodeDecodeError:
            raise ConfigError(f"jupyterhub.token_file {self.token_file} is not UTF-8 "
                              "text") from None
        except OSError as exc:
            raise ConfigError(f"jupyterhub.token_file {self.token_file}: {exc.strerror}; "
                              "check the path and its permissions") from None
        if not text:
            raise ConfigError(f"jupyterhub.token_file {self.token_file} is empty; put the "
                              "hub API token in it")
        return SecretStr(text)


class ClusterSettings(_Section):
    """One cluster, read through the Prometheus HTTP API that scrapes its dcgm-exporter and
    kube-state-metrics."""

    name: str = Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*$")
    prometheus_url: str = Field(pattern=r"^https?://[^\s]+$")
    bearer_token_file: Path | None = None
    # extra label matchers every query carries, for a Prometheus holding several clusters
    # (Thanos, Mimir, a federated server): `cluster="ml-prod"`
    selector: str = ""
    team_label: str = "team"
    namespace_teams: dict[str, str] = Field(default_factory=dict)
    owner_team: str | None = None
    protected_namespaces: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PROTECTED_NAMESPACES))
    cost_weights: CostWeights = Field(default_factory=CostWeights)
    # the API server: without it the cluster is reported, never acted on
    api: ApiSettings | None = None
    # a pod no controller owns has nothing to stop it through: deleting it ends its work
    # for good, so only where a cluster says so
    delete_bare_pods: bool = False
    jupyterhub: JupyterHubSettings | None = None
    timeout: Annotated[Duration, AfterValidator(at_least(
        timedelta(seconds=1), "a Prometheus query needs time to answer"))] = timedelta(seconds=30)

    @field_validator("selector")
    @classmethod
    def _matchers(cls, value: str) -> str:
        if value and not _SELECTOR.match(value):
            raise ValueError('use PromQL label matchers, e.g. cluster="ml-prod" or '
                             'cluster="a", region=~"us-.*" (no braces)')
        return value.strip()

    @field_validator("team_label")
    @classmethod
    def _label_key(cls, value: str) -> str:
        if not _LABEL_KEY.match(value):
            raise ValueError("use a Kubernetes label key such as team or example.com/team")
        return value

    def bearer_token(self) -> SecretStr | None:
        """The token in `bearer_token_file`, read when a client is built (a rotated token
        is picked up by the next cycle)."""
        if self.bearer_token_file is None:
            return None
        try:
            text = read_small_text(self.bearer_token_file, SECRET_BYTES).strip()
        except UnicodeDecodeError:
            raise ConfigError(f"kubernetes cluster {self.name}: bearer_token_file "
                              f"{self.bearer_token_file} is not UTF-8 text") from None
        except OSError as exc:
            raise ConfigError(f"kubernetes cluster {self.name}: cannot read bearer_token_file "
                              f"{self.bearer_token_file}: {exc.strerror}; check the path and "
                              "its permissions") from None
        if not text:
            raise ConfigError(f"kubernetes cluster {self.name}: bearer_token_file "
                              f"{self.bearer_token_file} is empty; put the token in it")
        return SecretStr(text)


class KubernetesSettings(_Section):
    clusters: list[ClusterSettings] = Field(default_factory=list)

    @field_validator("clusters")
    @classmethod
    def _unique(cls, value: list[ClusterSettings]) -> list[ClusterSettings]:
        names = [c.name for c in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"cluster names must be unique: {', '.join(twice)} given twice")
        return value

    def cluster(self, name: str | None) -> list[ClusterSettings]:
        """The cluster called `name` (all of them for None); a ConfigError naming the
        configured ones when there is none of that name."""
        if name is None:
            return list(self.clusters)
        found = [c for c in self.clusters if c.name == name]
        if not found:
            known = ", ".join(c.name for c in self.clusters) or "none configured"
            raise ConfigError(f"no Kubernetes cluster named {name!r} (configured: {known}); "
                              "add it under kubernetes.clusters in costguard.yaml")
        return found
