"""What each node costs an hour: the price costguard already gives its cloud instance.

A node names its instance in `spec.providerID` (KSM's `kube_node_info{provider_id}`):
`aws:///us-east-1a/i-0abc...` on EKS, `gce://PROJECT/ZONE/NAME` on GKE. Where costguard
governs that account the instance is in the store, priced as every report prices it
(overrides, the bill's rates, the price book, the shipped tables). Otherwise the node's
instance type (the well-known `node.kubernetes.io/instance-type` label, where KSM's label
allowlist exports it) and region are priced from the shipped tables. A node neither
gives is unpriced: its GPU-hours are still counted, its dollars are not guessed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from costguard.costs.pricing import PriceCatalog
from costguard.k8s.model import Node
from costguard.k8s.read import ksm_label
from costguard.model import Instance, InstanceState, Lifecycle, PriceQuote, ProviderName

_TYPE_LABELS = (ksm_label("node.kubernetes.io/instance-type"),
                ksm_label("beta.kubernetes.io/instance-type"))
_REGION_LABELS = (ksm_label("topology.kubernetes.io/region"),
                  ksm_label("failure-domain.beta.kubernetes.io/region"))
_SPOT_LABELS = {ksm_label("eks.amazonaws.com/capacityType"): "SPOT",
                ksm_label("karpenter.sh/capacity-type"): "spot",
                ksm_label("cloud.google.com/gke-spot"): "true",
                ksm_label("cloud.google.com/gke-preemptible"): "true"}


@dataclass(frozen=True)
class CloudRef:
    """A node's cloud instance, as its provider id names it."""

    provider: ProviderName
    instance: str  # the EC2 instance id, or the GCE instance's name
    zone: str
    project: str = ""

    @property
    def region(self) -> str:
        if self.provider == "aws":
            return self.zone.rstrip("abcdefghijklmnopqrstuvwxyz") if self.zone else ""
        return self.zone.rsplit("-", 1)[0] if "-" in self.zone else self.zone


def cloud_ref(provider_id: str) -> CloudRef | None:
    """`aws:///us-east-1a/i-0abc` or `gce://project/zone/name` as a `CloudRef`; None for
    another form (kind, an on-premises cluster)."""
    scheme, sep, rest = provider_id.partition("://")
    parts = rest.strip("/").split("/") if sep else []
    if scheme == "aws" and parts and parts[-1].startswith("i-"):
        return CloudRef("aws", parts[-1], parts[0] if len(parts) > 1 else "")
    if scheme == "gce" and len(parts) == 3 and all(parts):
        return CloudRef("gcp", parts[2], parts[1], parts[0])
    return None


@dataclass(frozen=True)
class NodePrice:
    quote: PriceQuote | None
    instance_type: str  # what was priced ('' when nothing said)
    via: str  # "inventory i-0abc", "instance-type label", or why it is unpriced


def node_prices(nodes: Iterable[Node], catalog: PriceCatalog,
                inventory: Iterable[Instance]) -> dict[str, NodePrice]:
    known = list(inventory)
    by_aws = {i.instance_id: i for i in known if i.provider == "aws"}
    by_gce = {(i.account, i.zone, i.name): i for i in known if i.provider == "gcp"}
    out: dict[str, NodePrice] = {}
    for node in nodes:
        ref = cloud_ref(node.provider_id)
        inst: Instance | None = None
        if ref is not None:
            inst = (by_aws.get(ref.instance) if ref.provider == "aws"
                    else by_gce.get((ref.project, ref.zone, ref.instance)))
        if inst is not None:
            out[node.name] = NodePrice(catalog.quote(inst), inst.instance_type,
                                       f"inventory {inst.instance_id}")
            continue
        out[node.name] = _by_label(node, ref, catalog)
    return out


def _by_label(node: Node, ref: CloudRef | None, catalog: PriceCatalog) -> NodePrice:
    itype = next((node.labels[k] for k in _TYPE_LABELS if node.labels.get(k)), "")
    region = next((node.labels[k] for k in _REGION_LABELS if node.labels.get(k)),
                  ref.region if ref else "")
    if ref is None:
        return NodePrice(None, itype, f"provider id {node.provider_id or '(none)'} names no "
                         "EC2 or GCE instance")
    if not itype:
        return NodePrice(None, "", f"{ref.instance} is not in costguard's inventory and KSM "
                         "exports no node.kubernetes.io/instance-type label (add it to "
                         "--metric-labels-allowlist)")
    spot = any(node.labels.get(k, "").lower() == v.lower() for k, v in _SPOT_LABELS.items())
    now = datetime.now(UTC)
    inst = Instance(provider=ref.provider, account=ref.project, region=region,
                    zone=ref.zone or None, instance_id=ref.instance, name=ref.instance,
                    instance_type=itype, state=InstanceState.RUNNING,
                    lifecycle=Lifecycle.SPOT if spot else Lifecycle.ON_DEMAND,
                    launch_time=now, observed_at=now)
    quote = catalog.quote(inst)
    via = "instance-type label" if quote else (
        f"no price known for {itype} in {region or 'an unknown region'}"
        + (" (spot)" if spot else ""))
    return NodePrice(quote, itype, via)
