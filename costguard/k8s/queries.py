"""The PromQL costguard asks a cluster's Prometheus, in one place.

Metric and label names are those dcgm-exporter and kube-state-metrics (KSM) write:

* dcgm-exporter (etc/default-counters.csv, etc/dcp-metrics-included.csv): per GPU, or per
  MIG instance, `DCGM_FI_PROF_SM_ACTIVE` (0-1, SM cycles busy: the DCP profile metric),
  `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (0-1, time the graphics/compute engine was busy; the one
  activity metric of the default counter set, and per MIG instance),
  `DCGM_FI_DEV_GPU_UTIL` (0-100, time any kernel ran; not reported for MIG instances) and
  `DCGM_FI_DEV_FB_USED` (MiB). Labels: `gpu`, `UUID`, `device`, `modelName`, MIG's
  `GPU_I_PROFILE` and `GPU_I_ID`, `Hostname` (newer: `hostname`), and with Kubernetes
  mapping on (the GPU Operator's default) `pod`, `namespace`, `container` of the pod that
  holds the GPU (`pod_name`, `pod_namespace`, `container_name` with the old names; a
  scrape without honor_labels renames them `exported_pod`, `exported_namespace`...).
* KSM: `kube_pod_container_resource_requests` (resource `nvidia_com_gpu`, MIG resources
  such as `nvidia_com_mig_1g_10gb`, `cpu` in cores, `memory` in bytes; label names
  sanitised), `kube_pod_status_phase`, `kube_pod_owner`, `kube_replicaset_owner`,
  `kube_job_owner`, `kube_pod_labels` / `kube_namespace_labels` / `kube_node_labels`
  (`label_<key>`, only the keys KSM's --metric-labels-allowlist names),
  `kube_node_info` (`provider_id`), `kube_node_status_allocatable`.
* cAdvisor (the kubelet's /metrics/cadvisor): `container_cpu_usage_seconds_total`
  (cumulative CPU seconds, labels `namespace`, `pod`, `container`; `container=""` is the
  pod's own cgroup, `POD` the pause container), for the CPU a GPU pod used of its request.

Each expression takes the cluster's extra matchers (`selector`), so one Prometheus may hold
several clusters.
"""

from __future__ import annotations

from datetime import timedelta

GPU_RESOURCES = 'nvidia_com_gpu|nvidia_com_mig_.+'
RESOURCES = f'{GPU_RESOURCES}|cpu|memory'
_RESOURCE_MATCH = f'resource=~"{RESOURCES}"'
_CONTROLLER = 'owner_is_controller!="false"'

# The GPU signals, one range query for all of them: each series tagged with the figure
# it is (`cg_signal`), so a window's activity is one request however many pods there are.
SIGNALS: dict[str, tuple[str, str]] = {
    "sm_max": ("max_over_time", "DCGM_FI_PROF_SM_ACTIVE"),
    "sm_mean": ("avg_over_time", "DCGM_FI_PROF_SM_ACTIVE"),
    "gr_max": ("max_over_time", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
    "gr_mean": ("avg_over_time", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
    "util_max": ("max_over_time", "DCGM_FI_DEV_GPU_UTIL"),
    "util_mean": ("avg_over_time", "DCGM_FI_DEV_GPU_UTIL"),
    "fb_used_mib": ("max_over_time", "DCGM_FI_DEV_FB_USED"),
}


# the pods' CPU, cores used per step, tagged the same way in the same query
CPU_SIGNAL = "cpu_cores"


def _sel(selector: str, *matchers: str) -> str:
    parts = [m for m in (*matchers, selector) if m]
    return "{" + ",".join(parts) + "}"


def _range(span: timedelta) -> str:
    return f"[{max(1, int(span.total_seconds()))}s]"


def pod_requests(selector: str) -> str:
    """Running pods' requests per pod, node and resource (a range query), on GPU nodes only:
    a pod that is Pending, Succeeded or Failed requests nothing of a node, and the pods of
    the cluster's CPU nodes (most of a big cluster's) are not what GPU spend is split by."""
    wanted = _sel(selector, _RESOURCE_MATCH)
    running = _sel(selector, 'phase="Running"')
    gpu_nodes = _sel(selector, f'resource=~"{GPU_RESOURCES}"')
    return (f"(sum by (namespace, pod, uid, node, resource) "
            f"(kube_pod_container_resource_requests{wanted})"
            f" * on (namespace, pod, uid) group_left () "
            f"(max by (namespace, pod, uid) (kube_pod_status_phase{running}) > 0))"
            f" and on (node) (kube_node_status_allocatable{gpu_nodes} > 0)")


def nodes(selector: str) -> str:
    """Which nodes exist at each step, with their cloud instance (a range query)."""
    return f"max by (node, provider_id) (kube_node_info{_sel(selector)})"


def node_allocatable(selector: str, span: timedelta) -> str:
    return (f"max by (node, resource) (last_over_time(kube_node_status_allocatable"
            f"{_sel(selector, _RESOURCE_MATCH)}{_range(span)}))")


def pod_owners(selector: str, span: timedelta) -> str:
    # a bare pod's series has empty owner labels (older KSM: "<none>")
    return (f"max by (namespace, pod, uid, owner_kind, owner_name) (last_over_time(kube_pod_owner"
            f"{_sel(selector, _CONTROLLER)}"
            f"{_range(span)}))")


def replicaset_owners(selector: str, span: timedelta) -> str:
    return (f"max by (namespace, replicaset, owner_kind, owner_name) (last_over_time("
            f"kube_replicaset_owner{_sel(selector)}{_range(span)}))")


def job_owners(selector: str, span: timedelta) -> str:
    return (f"max by (namespace, job_name, owner_kind, owner_name) (last_over_time("
            f"kube_job_owner{_sel(selector)}{_range(span)}))")


def labels(metric: str, selector: str, span: timedelta) -> str:
    """`kube_pod_labels`, `kube_namespace_labels` or `kube_node_labels` as last seen."""
    return f"last_over_time({metric}{_sel(selector)}{_range(span)})"


def gpu_signals(selector: str, step: timedelta) -> str:
    """Every GPU's activity per step: the peak and mean of each signal over the step; and
    each pod's CPU, in cores used over the step."""
    window = _range(step)
    parts = [f'label_replace({fn}({metric}{_sel(selector)}{window}), "cg_signal", "{name}", '
             f'"", "")' for name, (fn, metric) in SIGNALS.items()]
    containers = _sel(selector, 'container!=""', 'container!="POD"')
    cpu = (f"label_replace(sum by (namespace, pod) (rate(container_cpu_usage_seconds_total"
           f'{containers}{window})), "cg_signal", "{CPU_SIGNAL}", "", "")')
    return " or ".join([*parts, cpu])


def device_peak(selector: str, span: timedelta, resolution: timedelta) -> str:
    """The most GPUs and MIG instances that reported at once over the span (an instant
    query at its end): what sizes a read's activity answer, whatever the pods' churn."""
    return (f"max_over_time(count(DCGM_FI_DEV_FB_USED{_sel(selector)})"
            f"[{max(1, int(span.total_seconds()))}s:{max(60, int(resolution.total_seconds()))}s])")
