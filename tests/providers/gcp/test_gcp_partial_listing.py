"""The instance listing asks for the fields costguard reads alone (a partial response), and
maps every VM as it would from the whole VM; an API that rejects the selection is listed
whole from then on. Through the real google-cloud-compute client against the REST fake."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from costguard.demo.gcp_fake import fields
from costguard.demo.gcp_fake.server import FakeGcp
from costguard.model import ActionOutcome, Instance, InstanceState, OwnerKind
from costguard.providers.gcp import GcpProvider
from costguard.providers.gcp.inventory import INSTANCE_FIELDS, LIST_FIELDS, RECHECK_FIELDS

MIG = ("projects/123/zones/us-central1-a/instanceGroupManagers/trainers")


def _fleet(fake: FakeGcp) -> None:
    """A VM of every kind `to_instance` tells apart: GPUs attached and built in, spot and
    preemptible, stopped, a MIG's (metadata), a GKE node (labels), costguard's own labels,
    a service account."""
    c = fake.compute
    c.add_instance("ml-prod", "us-central1-a", "a100", "a2-highgpu-1g",
                   labels={"team": "nlp", "costguard_protect": "true"},
                   service_account="trainer@ml-prod.iam.gserviceaccount.com")
    c.add_instance("ml-prod", "us-central1-b", "t4", "n1-standard-8",
                   accelerators=[("nvidia-tesla-t4", 2)], spot=True)
    c.add_instance("ml-prod", "us-east1-c", "old", "n1-standard-4", preemptible=True,
                   status="TERMINATED", last_start=datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC))
    c.add_instance("ml-prod", "us-central1-a", "trainers-x1", "g2-standard-8",
                   metadata={"created-by": MIG, "startup-script": "#!/bin/sh\necho hi\n"})
    c.add_instance("ml-research", "europe-west4-a", "gke-node", "n1-standard-16",
                   labels={"goog-k8s-cluster-name": "ml", "goog-k8s-node-pool-name": "gpu"},
                   accelerators=[("nvidia-l4", 1)])


def _by_name(instances: list[Instance]) -> dict[str | None, Instance]:
    return {i.name: i for i in instances}


def test_partial_listing_maps_every_vm_as_the_whole_vm_does(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    _fleet(fake)
    projects = ["ml-prod", "ml-research"]
    whole = make_provider(projects=projects, partial_responses=False).list_instances()
    assert fake.compute.field_masks == []
    partial = make_provider(projects=projects).list_instances()
    assert fake.compute.field_masks == [LIST_FIELDS, LIST_FIELDS]  # one listing a project
    assert partial.gaps == whole.gaps == []
    assert _by_name(partial.instances) == _by_name(whole.instances)
    got = _by_name(partial.instances)
    # what the selection must not lose: the group a VM belongs to, GPUs, spot, who launched
    trainers, node = got["trainers-x1"].owner, got["gke-node"].owner
    assert trainers is not None and trainers.kind == OwnerKind.MIG
    assert node is not None and node.kind == OwnerKind.GKE
    assert got["t4"].gpu_count == 2 and got["t4"].lifecycle == "spot"
    assert got["a100"].gpu_count == 1 and got["a100"].tags["costguard:protect"] == "true"
    assert got["a100"].launched_by == "trainer@ml-prod.iam.gserviceaccount.com"
    assert got["old"].launch_time == datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC)  # last start


def test_partial_listing_pages_through_every_zone(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    zones = ["us-central1-a", "us-central1-b", "europe-west4-a"]
    for i in range(10):
        fake.compute.add_instance("ml-prod", zones[i % 3], f"vm-{i}")
    inv = make_provider(page_size=3).list_instances()
    assert sorted(i.name or "" for i in inv.instances) == [f"vm-{i}" for i in range(10)]
    assert fake.compute.calls["GET aggregated_list"] == 4  # the next page's token is kept
    assert fake.compute.field_masks == [LIST_FIELDS] * 4


def test_partial_listing_drops_what_costguard_does_not_read(fake: FakeGcp) -> None:
    vm = fake.compute.add_instance("ml-prod", "us-central1-a", "t4", "n1-standard-8",
                                   accelerators=[("nvidia-tesla-t4", 1)],
                                   metadata={"created-by": MIG})
    whole = vm.to_json()
    kept = fields.apply(whole, fields.parse(INSTANCE_FIELDS))
    assert "networkInterfaces" in whole and "disks" in whole
    assert set(kept) == {"id", "name", "zone", "machineType", "status", "creationTimestamp",
                         "lastStartTimestamp", "labels", "scheduling", "metadata",
                         "guestAccelerators"}
    assert kept["metadata"] == {"items": [{"key": "created-by", "value": MIG}]}
    assert len(str(kept)) < len(str(whole)) / 2


def test_a_rejected_selection_is_listed_whole_and_not_asked_again(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider], caplog: pytest.LogCaptureFixture
) -> None:
    _fleet(fake)
    fake.compute.reject_field_masks = True
    provider = make_provider()
    with caplog.at_level(logging.WARNING, logger="costguard.providers.gcp.inventory"):
        first = provider.list_instances()
    assert first.gaps == []
    assert sorted(i.name or "" for i in first.instances) == ["a100", "old", "t4",
                                                            "trainers-x1"]
    rejected = [r.getMessage() for r in caplog.records]
    assert len(rejected) == 1 and "rejected the partial listing" in rejected[0]
    asked = len(fake.compute.field_masks)
    assert provider.list_instances().gaps == []
    assert len(fake.compute.field_masks) == asked  # whole VMs from then on


def test_a_bad_request_the_whole_listing_gets_too_is_a_gap_and_keeps_the_selection(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    _fleet(fake)
    fake.compute.inject(400, times=2, path_contains="aggregated/instances")
    provider = make_provider()
    inv = provider.list_instances()
    assert inv.instances == [] and [g.scope for g in inv.gaps] == ["ml-prod"]
    masks = len(fake.compute.field_masks)
    assert len(provider.list_instances().instances) == 4
    assert fake.compute.field_masks[masks:] == [LIST_FIELDS]  # the selection was not to blame


@pytest.mark.parametrize("partial", [True, False], ids=["partial", "whole"])
def test_acting_decides_the_same_through_the_recheck_selection(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider], partial: bool
) -> None:
    """The re-check before acting reads what the runner, the stop, the relabel and the
    stopped-cost note need: a MIG's member reads back as the group's (metadata: the runner
    never acts on it as if alone), labels go with the fingerprint just read (no 412), the
    stopped VMs' disks are priced; both ways alike."""
    _fleet(fake)
    provider = make_provider(partial_responses=partial)
    vms = _by_name(provider.list_instances().instances)
    targets = [vms["a100"], vms["t4"], vms["trainers-x1"]]
    fake.compute.field_masks.clear()
    fake.compute.calls.clear()
    fresh = provider.describe_many(targets)
    assert fresh == {i.instance_id: i for i in targets}  # the owner read back included
    member = fresh[vms["trainers-x1"].instance_id]
    assert member is not None and member.owner is not None
    assert member.owner.kind == OwnerKind.MIG
    labelled = provider.set_tags_many(targets[:2], {"team": "vision"}, dry_run=False)
    assert {r.outcome for r in labelled.values()} == {ActionOutcome.DONE}
    # each relabelled once, with the fingerprint read: no 412, no VM read again
    assert fake.compute.calls["POST set_labels"] == 2 and fake.compute.calls["GET get"] == 0
    assert fake.compute.instance("ml-prod", "us-central1-b", "t4").labels["team"] == "vision"
    stopped = provider.stop_many(targets[:2], dry_run=False)
    for inst in targets[:2]:
        assert stopped[inst.instance_id].state_after == InstanceState.STOPPED
        quote = provider.stopped_cost(inst)  # the boot disk, priced from the read-back
        assert quote is not None and quote.usd_per_hour > 0
    rechecks = [m for m in fake.compute.field_masks if m == RECHECK_FIELDS]
    assert (len(rechecks) > 0) is partial
    assert fake.compute.field_masks == rechecks


@pytest.mark.parametrize(("value", "payload", "expected"), [
    ("a,c", {"a": 1, "b": 2, "c": 3}, {"a": 1, "c": 3}),
    ("a/b", {"a": {"b": 1, "c": 2}, "d": 3}, {"a": {"b": 1}}),
    ("a(b,c)", {"a": {"b": 1, "c": 2, "d": 3}}, {"a": {"b": 1, "c": 2}}),
    ("a/b,a/c", {"a": {"b": 1, "c": 2, "d": 3}}, {"a": {"b": 1, "c": 2}}),
    ("a,a/b", {"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 2}}),  # the whole of a wins
    ("a(b/c),a(b/d)", {"a": {"b": {"c": 1, "d": 2, "e": 3}}}, {"a": {"b": {"c": 1, "d": 2}}}),
    ("a/*/b", {"a": {"x": {"b": 1, "c": 2}, "y": {"c": 3}}}, {"a": {"x": {"b": 1}, "y": {}}}),
    ("a(b/c)", {"a": [{"b": {"c": 1, "d": 2}}, {"e": 3}]}, {"a": [{"b": {"c": 1}}, {}]}),
    ("*", {"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 2}}),
    ("missing", {"a": 1}, {}),
])
def test_the_fake_selects_as_partial_responses_do(
    value: str, payload: object, expected: object
) -> None:
    assert fields.apply(payload, fields.parse(value)) == expected


@pytest.mark.parametrize("value", ["", "a(b", "a)", "a//b", ",a", "a(b,)", "(a)"])
def test_a_malformed_selection_is_an_error(value: str) -> None:
    with pytest.raises(ValueError, match="Invalid field selection"):
        fields.parse(value)


def test_the_fake_answers_a_malformed_selection_with_400(fake: FakeGcp) -> None:
    import httpx

    fake.compute.add_instance("ml-prod", "us-central1-a", "vm")
    url = f"{fake.compute.url}/compute/v1/projects/ml-prod/aggregated/instances"
    bad = httpx.get(url, headers={"X-Goog-FieldMask": "items(("})
    assert bad.status_code == 400
    assert bad.json()["error"]["status"] == "INVALID_ARGUMENT"
    good = httpx.get(url, params={"fields": "items/*/instances/name"})
    assert good.json() == {"items": {"zones/us-central1-a": {"instances": [{"name": "vm"}]}}}
