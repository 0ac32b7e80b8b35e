"""Owner conventions on both clouds, tag by tag (each from the owning service's docs), and
which owner wins when an instance carries several."""

from __future__ import annotations

import pytest

from costguard.model import OwnerKind
from costguard.providers.aws.owners import owner_from_tags
from costguard.providers.gcp.owners import mig_of, owner_from_labels

R = "us-east-1"


@pytest.mark.parametrize(("tags", "kind", "name", "cluster"), [
    ({"aws:autoscaling:groupName": "gpu-asg"}, OwnerKind.ASG, "gpu-asg", None),
    ({"eks:cluster-name": "prod", "eks:nodegroup-name": "gpu-ng",
      "aws:autoscaling:groupName": "eks-gpu-ng-1234"}, OwnerKind.EKS, "gpu-ng", "prod"),
    ({"kubernetes.io/cluster/prod": "owned", "aws:autoscaling:groupName": "nodes"},
     OwnerKind.EKS, "nodes", "prod"),
    ({"karpenter.sh/nodepool": "gpu", "eks:eks-cluster-name": "prod"},
     OwnerKind.KARPENTER, "gpu", "prod"),
    ({"karpenter.sh/provisioner-name": "default"}, OwnerKind.KARPENTER, "default", None),
    ({"AWSBatchServiceTag": "batch", "aws:autoscaling:groupName":
      "AWSBatch-gpu-ce-asg-640012bd-4e90"}, OwnerKind.BATCH, "gpu-ce", None),
    ({"aws:elasticmapreduce:job-flow-id": "j-2AXXXXXXGAPLF",
      "aws:elasticmapreduce:instance-group-role": "CORE"}, OwnerKind.EMR, "j-2AXXXXXXGAPLF",
     "j-2AXXXXXXGAPLF"),
    ({"aws:ec2:fleet-id": "fleet-1"}, OwnerKind.EC2_FLEET, "fleet-1", None),
    ({"aws:ec2spot:fleet-request-id": "sfr-1"}, OwnerKind.SPOT_FLEET, "sfr-1", None),
    ({"parallelcluster:cluster-name": "hpc"}, OwnerKind.PARALLELCLUSTER, "hpc", "hpc"),
    ({"ray-cluster-name": "rl", "ray-node-type": "worker"}, OwnerKind.RAY, "rl", "rl"),
    ({"skypilot-cluster-name": "sky-1", "ray-cluster-name": "sky-1-2ea4"},
     OwnerKind.SKYPILOT, "sky-1", "sky-1"),
    ({"aws:sagemaker:domain-arn": "arn:x"}, OwnerKind.UNKNOWN, "arn:x", None),
])
def test_aws_tags_name_the_owner(tags: dict[str, str], kind: OwnerKind, name: str,
                                 cluster: str | None) -> None:
    owner = owner_from_tags(tags, R)
    assert owner is not None
    assert (owner.kind, owner.name, owner.cluster, owner.scope) == (kind, name, cluster, R)
    assert owner.via.startswith("tag ")


@pytest.mark.parametrize("tags", [
    {}, {"Name": "box", "team": "ml"},
    {"aws:cloudformation:stack-name": "s", "aws:cloudformation:logical-id": "Gpu"},
    {"aws:ec2launchtemplate:id": "lt-1", "aws:ec2launchtemplate:version": "3"},
    {"kubernetes.io/cluster/": "owned"},  # no cluster name: not a node
])
def test_pets_have_no_owner(tags: dict[str, str]) -> None:
    assert owner_from_tags(tags, R) is None


def test_kubernetes_owners_say_so_and_groups_are_scalable() -> None:
    assert OwnerKind.EKS.kubernetes and OwnerKind.GKE.kubernetes and OwnerKind.KARPENTER.kubernetes
    assert OwnerKind.ASG.scalable and OwnerKind.MIG.scalable
    assert not any(k.scalable for k in OwnerKind if k not in (OwnerKind.ASG, OwnerKind.MIG))


ZONAL = "projects/123456789012/zones/us-central1-a/instanceGroupManagers/gpu-mig"
REGIONAL = "https://www.googleapis.com/compute/v1/projects/123/regions/us-central1/" \
           "instanceGroupManagers/gpu-rmig"


def test_created_by_names_zonal_and_regional_groups() -> None:
    assert mig_of(ZONAL) == ("gpu-mig", "us-central1-a", False)
    assert mig_of(REGIONAL) == ("gpu-rmig", "us-central1", True)
    assert mig_of("projects/1/zones/z/instances/vm") is None
    assert mig_of("") is None and mig_of(None) is None


@pytest.mark.parametrize(("labels", "metadata", "kind", "name"), [
    ({}, {"created-by": ZONAL}, OwnerKind.MIG, "gpu-mig"),
    ({"goog-k8s-cluster-name": "ml", "goog-k8s-node-pool-name": "gpu-pool"},
     {"created-by": ZONAL}, OwnerKind.GKE, "gpu-pool"),
    ({"goog-dataproc-cluster-name": "etl", "goog-dataproc-cluster-uuid": "u"}, {},
     OwnerKind.DATAPROC, "etl"),
    ({"batch-job-id": "job-1"}, {}, OwnerKind.GCP_BATCH, "job-1"),
    ({"goog-vertex-workbench": "nb"}, {}, OwnerKind.VERTEX, "nb"),
    ({"ray-cluster-name": "rl"}, {}, OwnerKind.RAY, "rl"),
    ({"skypilot-cluster-name": "sky", "ray-cluster-name": "sky-x"}, {}, OwnerKind.SKYPILOT,
     "sky"),
])
def test_gcp_labels_and_metadata_name_the_owner(labels: dict[str, str],
                                                metadata: dict[str, str], kind: OwnerKind,
                                                name: str) -> None:
    owner = owner_from_labels(labels, metadata)
    assert owner is not None and (owner.kind, owner.name) == (kind, name)


def test_gcp_pets_and_ordinary_google_labels_have_no_owner() -> None:
    assert owner_from_labels({}, {}) is None
    assert owner_from_labels({"goog-ops-agent-policy": "v2", "team": "ml"},
                             {"startup-script": "echo"}) is None
