"""The GPU cluster the Kubernetes tests read: three GPU nodes on EKS, pods that train, sit
idle holding a GPU, serve no traffic, share MIG slices, and one node whose exporter does not
map GPUs to pods.

    node-a  p4d.24xlarge (in costguard's inventory: priced from the store)
            GPUs 0-3  research/train-llm-x7k2p  Job train-llm (CronJob nightly-train)  GPUs
                      0-1 busy, 2-3 hold memory and do nothing; 18 of 48 cores used
            GPU 4     research/notebook-alice-0 StatefulSet notebook-alice             idle
            GPU 5     serving/chat-infer-7d9f8-abcde  Deployment chat-infer            idle
            GPU 6     no pod (idle capacity)
            GPU 7     etl/prep-7c9d8-x2k4m  Deployment prep: GPU idle, 6 of 8 cores busy
                      (preprocessing on the CPU: work in progress)
            kube-system/aws-node-q2x9z  DaemonSet aws-node: a little CPU, no GPU
    node-b  p4d.24xlarge (priced by its instance-type label), GPU 0 in MIG: two 3g.20gb
            serving/embed-0, embed-1  StatefulSet embed, one 3g.20gb each: 0 a little busy
                      (SM 25 %, one core of four: latency-bound), 1 idle
            GPUs 1-7  research/sweep-0  bare pod, 7 GPUs, busy for an hour then idle
    node-c  a node whose provider id names no cloud instance (unpriced), whose
            dcgm-exporter runs without pod mapping: research/debug holds its GPU, unmeasured
    a CPU node with web/api-...: no GPU, so its pods are not read at all
"""

from __future__ import annotations

from tests.fakes.cluster_metrics import (
    Cluster,
    Gpu,
    Node,
    PodSpec,
    busy_then_idle,
    idle,
    training,
)
from tests.fakes.kube_api import KubeApi

A100 = "NVIDIA A100-SXM4-40GB"
GiB = 2**30
NODE_A_INSTANCE = "i-0a1b2c3d4e5f60001"


def scenario() -> Cluster:
    a_gpus = [Gpu(i, f"GPU-a{i:07d}-0000-4000-8000-00000000000{i}", A100) for i in range(8)]
    for i in range(4):
        a_gpus[i].activity = training(0.6 + 0.05 * i) if i < 2 else idle(30000.0)
        a_gpus[i].holder = "research/train-llm-x7k2p/trainer"
    a_gpus[4].holder = "research/notebook-alice-0/notebook"
    a_gpus[5].holder = "serving/chat-infer-7d9f8-abcde/server"
    a_gpus[5].activity = idle(15000.0)
    a_gpus[6].activity = idle(0.0)
    a_gpus[7].activity = idle(8000.0)
    a_gpus[7].holder = "etl/prep-7c9d8-x2k4m/prep"

    b_gpus = [Gpu(0, "GPU-b0000000-0000-4000-8000-000000000000", A100, training(0.25, 14000.0),
                  mig_profile="3g.20gb", mig_id="1", holder="serving/embed-0/embed"),
              Gpu(0, "GPU-b0000000-0000-4000-8000-000000000000", A100, idle(9000.0),
                  mig_profile="3g.20gb", mig_id="2", holder="serving/embed-1/embed")]
    for i in range(1, 8):
        b_gpus.append(Gpu(i, f"GPU-b{i:07d}-0000-4000-8000-00000000000{i}", A100,
                          busy_then_idle(60), holder="research/sweep-0/sweep"))
    c_gpu = Gpu(0, "GPU-c0000000-0000-4000-8000-000000000000", "NVIDIA L4", training(0.8))

    nodes = [
        Node("ip-10-0-1-10.ec2.internal", f"aws:///us-east-1a/{NODE_A_INSTANCE}", 96,
             1152 * GiB, a_gpus, {"nvidia_com_gpu": 8}),
        Node("ip-10-0-2-20.ec2.internal", "aws:///us-east-1b/i-0b1b2c3d4e5f60002", 96,
             1152 * GiB, b_gpus, {"nvidia_com_gpu": 7, "nvidia_com_mig_3g_20gb": 2},
             {"label_node_kubernetes_io_instance_type": "p4d.24xlarge",
              "label_topology_kubernetes_io_region": "us-east-1"}),
        Node("worker-c", "kind://docker/ml/worker-c", 8, 32 * GiB, [c_gpu],
             {"nvidia_com_gpu": 1}),
        # a CPU node: its pods are not read (GPU spend is split on GPU nodes only)
        Node("ip-10-0-9-90.ec2.internal", "aws:///us-east-1a/i-0c9c9c9c9c9c90009", 16,
             64 * GiB, []),
    ]
    gpu = "nvidia_com_gpu"
    pods = [
        PodSpec("research", "train-llm-x7k2p", nodes[0].name, "Job", "train-llm",
                {gpu: 4, "cpu": 48, "memory": 512 * GiB}, {"label_team": "nlp"},
                cpu=lambda m: 18.0),
        PodSpec("research", "notebook-alice-0", nodes[0].name, "StatefulSet", "notebook-alice",
                {gpu: 1, "cpu": 4, "memory": 64 * GiB}, {"label_team": "alice-lab"},
                cpu=lambda m: 0.02),
        PodSpec("serving", "chat-infer-7d9f8-abcde", nodes[0].name, "ReplicaSet",
                "chat-infer-7d9f8", {gpu: 1, "cpu": 8, "memory": 64 * GiB}, cpu=lambda m: 0.1),
        PodSpec("kube-system", "aws-node-q2x9z", nodes[0].name, "DaemonSet", "aws-node",
                {"cpu": 0.025}),
        PodSpec("serving", "embed-0", nodes[1].name, "StatefulSet", "embed",
                {"nvidia_com_mig_3g_20gb": 1, "cpu": 4, "memory": 32 * GiB},
                cpu=lambda m: 1.0),
        PodSpec("serving", "embed-1", nodes[1].name, "StatefulSet", "embed",
                {"nvidia_com_mig_3g_20gb": 1, "cpu": 4, "memory": 32 * GiB}),
        PodSpec("research", "sweep-0", nodes[1].name, "", "",
                {gpu: 7, "cpu": 80, "memory": 1000 * GiB}, {"label_team": "nlp"}),
        PodSpec("research", "debug", nodes[2].name, "", "", {gpu: 1, "cpu": 2}),
        PodSpec("etl", "prep-7c9d8-x2k4m", nodes[0].name, "ReplicaSet", "prep-7c9d8",
                {gpu: 1, "cpu": 8, "memory": 32 * GiB}, {"label_team": "data"},
                cpu=lambda m: 6.0),
        PodSpec("web", "api-5d8f7-k2x9q", nodes[3].name, "ReplicaSet", "api-5d8f7",
                {"cpu": 2, "memory": 4 * GiB}, cpu=lambda m: 1.5),
        # finished before the period: requests nothing of its node
        PodSpec("research", "old-eval", nodes[0].name, "Job", "eval", {gpu: 2},
                phase="Succeeded"),
    ]
    return Cluster(
        nodes, pods,
        namespaces={"research": {"label_team": "research"}, "serving": {},
                    "kube-system": {}, "etl": {}},
        replicasets={("serving", "chat-infer-7d9f8"): ("Deployment", "chat-infer"),
                     ("etl", "prep-7c9d8"): ("Deployment", "prep")},
        jobs={("research", "train-llm"): ("CronJob", "nightly-train"),
              ("research", "eval"): ("", "")},
    )


def api_objects(api: KubeApi) -> KubeApi:
    """The same cluster's objects, as its API server holds them."""
    for ns, labels in (("research", {"team": "research"}), ("serving", {}),
                       ("kube-system", {}), ("etl", {})):
        api.add("namespaces", "", ns, labels=labels)
    for node in scenario().nodes:
        labels = {"node.kubernetes.io/instance-type": "p4d.24xlarge",
                  "topology.kubernetes.io/region": "us-east-1"} if node.name.startswith(
            "ip-") else {}
        api.add("nodes", "", node.name, labels=labels,
                spec={"providerID": node.provider_id})
    api.add("deployments", "serving", "chat-infer", labels={"app": "chat-infer"},
            spec={"replicas": 1, "template": _pod_template("server", {"nvidia.com/gpu": "1"})},
            status={"replicas": 1, "readyReplicas": 1})
    api.add("deployments", "etl", "prep", labels={"app": "prep"},
            spec={"replicas": 1, "template": _pod_template("prep", {"nvidia.com/gpu": "1"})},
            status={"replicas": 1, "readyReplicas": 1})
    api.add("notebooks", "research", "notebook-alice", labels={"owner": "alice"})
    api.add("statefulsets", "research", "notebook-alice", spec={"replicas": 1},
            owner=("kubeflow.org/v1", "Notebook", "notebook-alice"))
    api.add("statefulsets", "serving", "embed", spec={
        "replicas": 2, "template": _pod_template("embed", {"nvidia.com/mig-3g.20gb": "1"})})
    api.add("cronjobs", "research", "nightly-train", spec={"schedule": "0 1 * * *"},
            status={"active": [{"kind": "Job", "namespace": "research",
                                "name": "train-llm"}]})
    api.add("jobs", "research", "train-llm", spec={"parallelism": 1},
            owner=("batch/v1", "CronJob", "nightly-train"))
    api.add("pods", "research", "sweep-0", labels={"team": "nlp"})
    api.add("pods", "research", "debug")
    api.add("daemonsets", "kube-system", "aws-node")
    return api


def _pod_template(container: str, limits: dict[str, str]) -> dict[str, object]:
    """A workload's pod template as the API reference shapes it (extended resources such
    as GPUs are given as limits; requests default to them)."""
    return {"metadata": {"labels": {"app": container}},
            "spec": {"containers": [{"name": container, "image": "registry.example.com/ml:1",
                                     "resources": {"limits": {"cpu": "8", **limits}}}]}}
