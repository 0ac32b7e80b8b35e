"""What a stopped VM still costs on GCP: its persistent disks (disks.get for size and type)."""

from __future__ import annotations

from collections.abc import Callable

from costguard.providers.gcp import GcpProvider
from costguard.providers.gcp.fake_disks import FakeDisk
from costguard.providers.gcp.fake_server import FakeGcp


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
