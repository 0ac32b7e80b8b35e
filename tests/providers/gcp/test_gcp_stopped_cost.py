"""What a stopped VM still costs on GCP: its persistent disks (size and type from disks.get,
or, after stop_many, from one filtered disks.aggregatedList for all the stopped VMs)."""

from __future__ import annotations

from collections.abc import Callable

from costguard.demo.gcp_fake.disks import FakeDisk
from costguard.demo.gcp_fake.server import FakeGcp
from costguard.model import ActionOutcome, Instance
from costguard.providers.gcp import GcpProvider


def test_stopped_cost_prices_each_persistent_disk(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    fake.compute.add_instance("ml-prod", "us-central1-a", "vm", status="TERMINATED", disks=[
        FakeDisk("vm", size_gb=200, boot=True),  # pd-balanced
        FakeDisk("vm-data", size_gb=1000, disk_type="pd-ssd"),
        FakeDisk("vm-scratch", scratch=True)])
    provider = make_provider()
    (inst,) = provider.list_instances().instances

    quote = provider.stopped_cost(inst)

    # 200 GiB x $0.10 + 1000 GiB x $0.17 = $190 a month = $0.2603/h; the local SSD not counted
    assert quote is not None and quote.usd_per_hour == 0.2603
    assert "200 GiB pd-balanced" in quote.source and "1000 GiB pd-ssd" in quote.source
    assert fake.compute.calls["GET disk_get"] == 2


def test_an_unknown_disk_type_is_named_not_guessed(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    fake.compute.add_instance("ml-prod", "us-central1-a", "vm", status="TERMINATED", disks=[
        FakeDisk("vm", size_gb=100, boot=True),
        FakeDisk("vm-x", size_gb=50, disk_type="hyperdisk-ml")])
    provider = make_provider()
    (inst,) = provider.list_instances().instances

    quote = provider.stopped_cost(inst)

    assert quote is not None and quote.usd_per_hour == round(100 * 0.10 / 730, 4)
    assert "not priced: 50 GiB hyperdisk-ml" in quote.source


def _two_running(fake: FakeGcp, provider: GcpProvider) -> list[Instance]:
    fake.compute.add_instance("ml-prod", "us-central1-a", "a", disks=[
        FakeDisk("a", size_gb=200, boot=True),
        FakeDisk("a-data", size_gb=1000, disk_type="pd-ssd", auto_delete=False)])
    fake.compute.add_instance("ml-prod", "us-central1-b", "b", disks=[
        FakeDisk("b", size_gb=100, boot=True), FakeDisk("b-scratch", scratch=True)])
    fake.compute.add_instance("ml-prod", "us-central1-b", "a-data-twin", disks=[
        FakeDisk("a-data", size_gb=10)])  # same disk name in another zone: not a's disk
    return sorted((i for i in provider.list_instances().instances if i.name != "a-data-twin"),
                  key=lambda i: i.name or "")


def test_stop_many_prices_the_stopped_vms_disks_in_one_listing(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    provider = make_provider()
    a, b = _two_running(fake, provider)
    fake.compute.calls.clear()

    results = provider.stop_many([a, b], dry_run=False)

    assert {r.outcome for r in results.values()} == {ActionOutcome.DONE}
    assert fake.compute.calls["GET disk_aggregated_list"] == 1
    fake.compute.calls.clear()
    quote_a, quote_b = provider.stopped_cost(a), provider.stopped_cost(b)
    assert sum(fake.compute.calls.values()) == 0  # priced in bulk by stop_many
    # a: 200 GiB x $0.10 + 1000 GiB x $0.17 = $190 a month; b: 100 GiB x $0.10, no local SSD
    assert quote_a is not None and quote_a.usd_per_hour == 0.2603
    assert "200 GiB pd-balanced" in quote_a.source and "1000 GiB pd-ssd" in quote_a.source
    assert quote_b is not None and quote_b.usd_per_hour == round(10 / 730, 4)
    # the bulk quote is used once; a later ask reads the VM and its disks again
    assert provider.stopped_cost(a) == quote_a
    assert fake.compute.calls == {"GET get": 1, "GET disk_get": 2}


def test_when_the_disks_cannot_be_listed_each_vm_is_priced_on_its_own(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    provider = make_provider()
    a, b = _two_running(fake, provider)
    fake.compute.inject(403, times=1, path_contains="/aggregated/disks")

    provider.stop_many([a, b], dry_run=False)
    fake.compute.calls.clear()
    quote_a = provider.stopped_cost(a)

    assert quote_a is not None and quote_a.usd_per_hour == 0.2603
    assert fake.compute.calls == {"GET get": 1, "GET disk_get": 2}


def test_an_unreachable_zone_in_the_disk_listing_leaves_pricing_to_each_vm(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    provider = make_provider()
    a, b = _two_running(fake, provider)
    provider.stop_many([a, b], dry_run=False)  # priced in bulk: both zones listed
    assert provider.stopped_cost(b) is not None
    fake.compute.set_status("ml-prod", "us-central1-a", "a", "RUNNING")
    fake.compute.unreachable_zones.add("us-central1-b")  # disks there cannot be listed
    fresh = provider.describe_many([a])[a.instance_id]
    assert fresh is not None
    provider.stop_many([fresh], dry_run=False)
    fake.compute.calls.clear()
    quote_a = provider.stopped_cost(fresh)
    assert quote_a is not None and quote_a.usd_per_hour == 0.2603
    assert fake.compute.calls == {"GET get": 1, "GET disk_get": 2}  # not from a partial list
