"""Reading a cluster's GPU pods from a real Prometheus that holds dcgm-exporter's and
kube-state-metrics' series (three hours of the scenario in tests/k8s/scenario.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from costguard.k8s.allocate import IDLE_CAPACITY, allocate, group
from costguard.k8s.model import PodKey, Workload
from costguard.k8s.prices import NodePrice
from costguard.k8s.prometheus import PrometheusClient
from costguard.k8s.read import read_cluster
from costguard.k8s.settings import ClusterSettings
from costguard.model import PriceQuote, Verdict
from tests.k8s.history import History, hours
from tests.k8s.scenario import NODE_A_INSTANCE

NODE_A, NODE_B = "ip-10-0-1-10.ec2.internal", "ip-10-0-2-20.ec2.internal"
P4D = 32.7726  # $/h, any figure: the split is what is tested


def cfg(url: str, **kw: object) -> ClusterSettings:
    return ClusterSettings.model_validate({"name": "ml-prod", "prometheus_url": url,
                                           "namespace_teams": {"serving": "platform"},
                                           "owner_team": "platform", **kw})


def read(history: History, since: timedelta = hours(3), step: timedelta = timedelta(minutes=5),
         **kw: object):  # type: ignore[no-untyped-def]
    with PrometheusClient(history.url, cluster="ml-prod") as client:
        return read_cluster(client, cfg(history.url, **kw), history.end - since, history.end,
                            step)


PRICED = {NODE_A: NodePrice(PriceQuote(usd_per_hour=P4D, source="t"), "p4d.24xlarge", "t"),
          NODE_B: NodePrice(PriceQuote(usd_per_hour=P4D, source="t"), "p4d.24xlarge", "t")}


def test_pods_owners_and_nodes_are_read_as_the_exporters_name_them(history: History) -> None:
    r = read(history)
    pods = r.pods
    assert pods[PodKey("serving", "chat-infer-7d9f8-abcde")].owner == Workload(
        "Deployment", "chat-infer")  # through its ReplicaSet
    assert pods[PodKey("research", "train-llm-x7k2p")].owner == Workload(
        "CronJob", "nightly-train")  # through its Job
    assert pods[PodKey("research", "sweep-0")].owner == Workload("Pod", "sweep-0")  # bare
    assert pods[PodKey("kube-system", "aws-node-q2x9z")].owner == Workload("DaemonSet",
                                                                           "aws-node")
    assert PodKey("research", "old-eval") not in pods  # Succeeded: requests nothing
    assert not [k for k in pods if k.namespace == "web"]  # on a CPU node: not read
    train = pods[PodKey("research", "train-llm-x7k2p")]
    assert (train.requests.gpus, train.requests.gpu_units, train.requests.cpu) == (4, 4, 48)
    assert len(train.devices) == 4 and {d.node for d in train.devices.values()} == {NODE_A}
    embed = pods[PodKey("serving", "embed-0")]
    assert embed.requests.gpu_resource == "nvidia.com/mig-3g.20gb"
    assert embed.requests.gpus == pytest.approx(3 / 7)
    (device,) = embed.devices.values()
    assert (device.mig_profile, device.mig_id) == ("3g.20gb", "1")
    assert r.nodes[NODE_A].provider_id == f"aws:///us-east-1a/{NODE_A_INSTANCE}"
    assert r.nodes[NODE_A].gpus == 8
    assert r.nodes[NODE_B].gpus == pytest.approx(7 + 6 / 7)
    assert r.free_devices[NODE_A] == {("GPU-a0000006-0000-4000-8000-000000000006", "")}
    assert pods[PodKey("research", "train-llm-x7k2p")].labels == {"label_team": "nlp"}
    assert r.namespace_labels["research"] == {"label_team": "research"}
    # cAdvisor's CPU, per step: the container's cores (not doubled by the pod's cgroup);
    # a pod with no CPU series (sweep-0) has none
    assert train.cpu_used and all(v == pytest.approx(18.0, rel=1e-3)
                                  for v in train.cpu_used.values())
    assert len(train.cpu_used) == len(train.steps)
    assert pods[PodKey("research", "sweep-0")].cpu_used == {}


def test_the_number_of_queries_does_not_grow_with_pods_or_hours(history: History) -> None:
    short = read(history, since=hours(1))
    long = read(history, since=hours(3))
    assert short.calls == long.calls == 10
    assert len(long.pods) == 9


def test_every_dollar_of_a_node_goes_to_a_pod_or_to_idle_capacity(history: History) -> None:
    r = read(history)
    lines = allocate(r, PRICED, cfg(history.url))
    for node in (NODE_A, NODE_B):
        spent = sum(cl.cost_micros for cl in lines if cl.node == node)
        assert spent == pytest.approx(P4D * 3 * 1e6, abs=50)  # rounding per step only
    gpu_hours = sum(cl.gpu_seconds for cl in lines if cl.node == NODE_A) / 3600
    assert gpu_hours == pytest.approx(8 * 3)


def test_idle_allocated_gpus_are_found_per_pod(history: History) -> None:
    r = read(history)
    by_pod = {cl.pod: cl for cl in allocate(r, PRICED, cfg(history.url))}
    assert by_pod["notebook-alice-0"].verdicts == {"idle": 3}
    assert by_pod["notebook-alice-0"].idle_cost_micros == by_pod["notebook-alice-0"].cost_micros
    assert by_pod["chat-infer-7d9f8-abcde"].verdicts == {"idle": 3}
    assert by_pod["train-llm-x7k2p"].verdicts == {"active": 3}
    assert by_pod["train-llm-x7k2p"].idle_cost_micros == 0
    assert by_pod["embed-0"].verdicts == {"active": 3}  # a MIG slice, judged on its own
    assert by_pod["embed-1"].verdicts == {"idle": 3}
    sweep = by_pod["sweep-0"]  # busy for the first hour of three
    assert sweep.verdicts == {"active": 1, "idle": 2}
    assert sweep.idle_cost_micros == pytest.approx(sweep.cost_micros * 2 / 3, rel=1e-6)
    assert "SM activity peaked at 0.0%" in by_pod["notebook-alice-0"].evidence
    assert "21.5 GB memory held" in by_pod["notebook-alice-0"].evidence


def test_no_data_is_never_idle(history: History) -> None:
    """worker-c's exporter maps no GPU to a pod: the pod holding it is unmeasured."""
    r = read(history)
    debug = next(cl for cl in allocate(r, PRICED, cfg(history.url)) if cl.pod == "debug")
    assert debug.verdicts == {str(Verdict.NO_DATA): 3}
    assert debug.idle_gpu_seconds == 0
    assert debug.unpriced_gpu_seconds == debug.gpu_seconds == 3 * 3600


def test_teams_come_from_the_pod_then_the_namespace_then_the_config(history: History) -> None:
    r = read(history)
    lines = allocate(r, PRICED, cfg(history.url))
    teams = {cl.pod: cl.team for cl in lines}
    assert teams["train-llm-x7k2p"] == "nlp"  # the pod's label
    assert teams["debug"] == "research"  # its namespace's label
    assert teams["embed-0"] == "platform"  # namespace_teams
    assert teams["aws-node-q2x9z"] == "unattributed"
    idle = [cl for cl in lines if cl.namespace == IDLE_CAPACITY]
    assert {cl.team for cl in idle} == {"platform"}  # owner_team pays for free GPUs
    grouped = dict(group(lines, ["namespace"]))
    assert grouped[(IDLE_CAPACITY,)].idle_gpu_seconds == pytest.approx(1 * 3 * 3600)


def test_a_selector_narrows_every_query(history: History) -> None:
    r = read(history, selector='cluster="another"')
    assert not r.pods and not r.nodes
