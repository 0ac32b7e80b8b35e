"""describe_many / stop_many / set_tags_many on the Compute fake, through the real client."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from costguard.errors import ProviderError
from costguard.model import ActionOutcome, Instance, InstanceState
from costguard.providers.base import BatchActions, Describes
from costguard.providers.gcp import GcpProvider
from costguard.providers.gcp.fake_server import FakeGcp

ZONES = ["us-central1-a", "us-central1-b", "europe-west4-a"]


@pytest.fixture
def fleet(fake: FakeGcp, make_provider: Callable[..., GcpProvider]
          ) -> tuple[GcpProvider, dict[str, Instance]]:
    for i in range(6):
        fake.compute.add_instance("ml-prod", ZONES[i % 3], f"vm-{i}", "a2-highgpu-1g")
    # 3 list pages for the project: re-checks of up to 11 VMs use per-VM gets
    provider = make_provider(batch_workers=4, page_size=2)
    listed = {i.name or "": i for i in provider.list_instances().instances}
    fake.compute.calls.clear()
    return provider, listed


def test_gcp_provider_offers_both_batch_capabilities(
    fleet: tuple[GcpProvider, dict[str, Instance]]
) -> None:
    provider, _ = fleet
    assert isinstance(provider, Describes)
    assert isinstance(provider, BatchActions)


def test_describe_many_reads_each_vm_and_marks_gone_and_recreated_ones_none(
    fake: FakeGcp, fleet: tuple[GcpProvider, dict[str, Instance]]
) -> None:
    provider, vms = fleet
    fake.compute.set_status("ml-prod", ZONES[1], "vm-1", "TERMINATED")
    fake.compute.inject(404, times=5, path_contains="/instances/vm-2")  # deleted meanwhile
    fake.compute.add_instance("ml-prod", ZONES[0], "vm-3", "a2-highgpu-1g")  # same name, new id
    fresh = provider.describe_many([vms[f"vm-{i}"] for i in range(4)])
    assert set(fresh) == {vms[f"vm-{i}"].instance_id for i in range(4)}
    assert fresh[vms["vm-0"].instance_id] is not None
    assert fresh[vms["vm-0"].instance_id].state == InstanceState.RUNNING
    assert fresh[vms["vm-1"].instance_id].state == InstanceState.STOPPED
    assert fresh[vms["vm-2"].instance_id] is None
    assert fresh[vms["vm-3"].instance_id] is None
    assert fake.compute.calls["GET get"] == 3  # plus the injected 404
    assert fake.compute.calls["GET aggregated_list"] == 0


def test_describe_many_raises_rather_than_call_an_unreadable_vm_gone(
    fake: FakeGcp, fleet: tuple[GcpProvider, dict[str, Instance]]
) -> None:
    provider, vms = fleet
    fake.compute.inject(403, times=5, path_contains="/instances/vm-4")
    with pytest.raises(ProviderError, match="permission denied"):
        provider.describe_many(list(vms.values()))


def test_describe_many_lists_the_project_when_that_is_far_fewer_calls(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    for i in range(40):
        fake.compute.add_instance("ml-prod", ZONES[i % 3], f"big-{i:02d}", "g2-standard-4")
    provider = make_provider(page_size=10)  # 4 pages for the project
    listed = provider.list_instances().instances
    fake.compute.set_status("ml-prod", ZONES[0], "big-00", "TERMINATED")
    recreated = listed[1]  # its name now belongs to a new VM
    fake.compute.add_instance("ml-prod", recreated.zone or "", recreated.name or "")
    fake.compute.calls.clear()
    fresh = provider.describe_many(listed[:16])  # 16 gets vs 4 pages: list
    assert fake.compute.calls == {"GET aggregated_list": 4}
    assert len(fresh) == 16 and fresh[recreated.instance_id] is None
    assert sum(v is None for v in fresh.values()) == 1
    assert [i.state for i in fresh.values() if i and i.name == "big-00"] == [
        InstanceState.STOPPED]
    fake.compute.calls.clear()
    provider.describe_many(listed[:15])  # 15 < 4 pages x 4: per-VM gets
    assert fake.compute.calls == {"GET get": 15}


def test_stop_many_issues_all_then_waits_and_reports_partial_failures(
    fake: FakeGcp, fleet: tuple[GcpProvider, dict[str, Instance]]
) -> None:
    provider, vms = fleet
    fake.compute.operation_delay_s = 0.2
    fake.compute.inject(404, times=1, path_contains="/instances/vm-1/stop")
    fake.compute.inject(409, times=1, path_contains="/instances/vm-2/stop")
    fake.compute.inject(429, times=2, path_contains="/instances/vm-3/stop")  # retried
    results = provider.stop_many(list(vms.values()), dry_run=False)

    assert set(results) == {v.instance_id for v in vms.values()}
    outcome = {name: results[v.instance_id] for name, v in vms.items()}
    assert outcome["vm-1"].outcome == ActionOutcome.SKIPPED
    assert outcome["vm-1"].state_after == InstanceState.TERMINATED
    assert outcome["vm-2"].outcome == ActionOutcome.FAILED
    assert "Conflict" in outcome["vm-2"].detail or "409" in outcome["vm-2"].detail
    for name in ("vm-0", "vm-3", "vm-4", "vm-5"):
        assert outcome[name].outcome == ActionOutcome.DONE, outcome[name]
        assert outcome[name].state_after == InstanceState.STOPPED
        assert fake.compute.instance("ml-prod", vms[name].zone or "", name).status == "TERMINATED"
    assert fake.compute.instance("ml-prod", ZONES[2], "vm-2").status == "RUNNING"
    assert fake.compute.calls["POST stop"] == 4  # vm-1 and vm-2 were refused by injection
    assert fake.compute.calls["POST injected-429"] == 2
    assert fake.compute.calls["POST operation_wait"] >= 4
    assert fake.compute.calls["GET get"] == 4  # the read-back, none before the call


def test_stop_many_dry_run_and_not_running_make_no_calls(
    fake: FakeGcp, fleet: tuple[GcpProvider, dict[str, Instance]]
) -> None:
    provider, vms = fleet
    parked = vms["vm-0"].model_copy(update={"state": InstanceState.STOPPED})
    results = provider.stop_many([parked, vms["vm-1"]], dry_run=True)
    assert results[parked.instance_id].outcome == ActionOutcome.SKIPPED
    assert results[vms["vm-1"].instance_id].outcome == ActionOutcome.DRY_RUN
    assert "would stop vm-1 (a2-highgpu-1g)" in results[vms["vm-1"].instance_id].detail
    assert sum(fake.compute.calls.values()) == 0


def test_stop_many_fails_a_vm_that_reads_back_running(
    fake: FakeGcp, fleet: tuple[GcpProvider, dict[str, Instance]]
) -> None:
    provider, vms = fleet

    def restart_it(method: str, path: str) -> None:
        # someone starts vm-5 again between our stop and our read-back
        if method == "GET" and path.endswith("/instances/vm-5"):
            fake.compute.set_status("ml-prod", ZONES[2], "vm-5", "RUNNING")

    fake.compute.on_request = restart_it
    results = provider.stop_many([vms["vm-5"], vms["vm-0"]], dry_run=False)
    assert results[vms["vm-5"].instance_id].outcome == ActionOutcome.FAILED
    assert "the VM is running" in results[vms["vm-5"].instance_id].detail
    assert results[vms["vm-0"].instance_id].outcome == ActionOutcome.DONE


def test_set_tags_many_relabels_each_vm_with_412_and_404_handled(
    fake: FakeGcp, fleet: tuple[GcpProvider, dict[str, Instance]]
) -> None:
    provider, vms = fleet
    fake.compute.relabel("ml-prod", ZONES[0], "vm-0", {"team": "vision"})
    fake.compute.inject(404, times=5, path_contains="/instances/vm-1")
    raced: list[str] = []

    def someone_else_relabels(method: str, path: str) -> None:
        if path.endswith("/instances/vm-2/setLabels") and not raced:
            raced.append(path)
            fake.compute.relabel("ml-prod", ZONES[2], "vm-2", {"owner": "ana"})

    fake.compute.on_request = someone_else_relabels
    results = provider.set_tags_many(
        list(vms.values()), {"costguard:untagged-since": "2026-11-23"}, remove=["team"],
        dry_run=False)

    assert set(results) == {v.instance_id for v in vms.values()}
    assert results[vms["vm-1"].instance_id].outcome == ActionOutcome.SKIPPED
    done = [n for n, v in vms.items() if results[v.instance_id].outcome == ActionOutcome.DONE]
    assert sorted(done) == ["vm-0", "vm-2", "vm-3", "vm-4", "vm-5"]
    assert fake.compute.instance("ml-prod", ZONES[0], "vm-0").labels == {
        "costguard_untagged-since": "2026-11-23"}
    assert fake.compute.instance("ml-prod", ZONES[2], "vm-2").labels == {
        "owner": "ana", "costguard_untagged-since": "2026-11-23"}
    assert fake.compute.calls["POST set_labels"] == 6  # five VMs, one of them twice (412)


def test_set_tags_many_dry_run_changes_nothing(
    fake: FakeGcp, fleet: tuple[GcpProvider, dict[str, Instance]]
) -> None:
    provider, vms = fleet
    results = provider.set_tags_many(list(vms.values()), {"owner": "bo"}, dry_run=True)
    assert {r.outcome for r in results.values()} == {ActionOutcome.DRY_RUN}
    assert fake.compute.calls["POST set_labels"] == 0
    assert all(not fake.compute.instance("ml-prod", v.zone or "", n).labels
               for n, v in vms.items())
