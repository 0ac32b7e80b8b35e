"""describe_many / stop_many / set_tags_many on the Compute fake, through the real client:
each test runs with Compute Engine HTTP batches (the default: stops, relabels and operation
polls in multipart batch requests) and without (one call per VM in a pool)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from costguard.clock import ManualClock
from costguard.demo.gcp_fake.server import FakeGcp
from costguard.errors import ProviderError
from costguard.model import ActionOutcome, Instance, InstanceState
from costguard.providers.base import BatchActions, Describes
from costguard.providers.gcp import GcpProvider, lookup

ZONES = ["us-central1-a", "us-central1-b", "europe-west4-a"]


@pytest.fixture(params=[True, False], ids=["http-batch", "per-vm"])
def batched(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def without_batches(calls: Counter[str]) -> dict[str, int]:
    """The calls, each inner call of a batch counted as itself, the batches left out."""
    return {k: v for k, v in calls.items() if k != "POST batch"}


def waited(calls: Counter[str]) -> int:
    """Operation waits (one VM at a time) or polls (in batches)."""
    return calls["POST operation_wait"] + calls["GET operation_get"]


@pytest.fixture
def fleet(fake: FakeGcp, make_provider: Callable[..., GcpProvider], batched: bool
          ) -> tuple[GcpProvider, dict[str, Instance]]:
    for i in range(6):
        fake.compute.add_instance("ml-prod", ZONES[i % 3], f"vm-{i}", "a2-highgpu-1g")
    # 3 list pages for the project
    provider = make_provider(batch_workers=4, page_size=2, http_batch=batched)
    listed = {i.name or "": i for i in provider.list_instances().instances}
    fake.compute.calls.clear()
    return provider, listed


def test_gcp_provider_offers_both_batch_capabilities(
    fleet: tuple[GcpProvider, dict[str, Instance]]
) -> None:
    provider, _ = fleet
    assert isinstance(provider, Describes)
    assert isinstance(provider, BatchActions)


def test_describe_many_lists_the_named_vms_and_marks_gone_and_recreated_ones_none(
    fake: FakeGcp, fleet: tuple[GcpProvider, dict[str, Instance]]
) -> None:
    provider, vms = fleet
    fake.compute.set_status("ml-prod", ZONES[1], "vm-1", "TERMINATED")
    fake.compute.remove_instance("ml-prod", ZONES[2], "vm-2")  # deleted meanwhile
    fake.compute.remove_instance("ml-prod", ZONES[0], "vm-3")
    fake.compute.add_instance("ml-prod", ZONES[0], "vm-3", "a2-highgpu-1g")  # same name, new id
    fresh = provider.describe_many([vms[f"vm-{i}"] for i in range(4)])
    assert set(fresh) == {vms[f"vm-{i}"].instance_id for i in range(4)}
    vm0, vm1 = fresh[vms["vm-0"].instance_id], fresh[vms["vm-1"].instance_id]
    assert vm0 is not None and vm0.state == InstanceState.RUNNING
    assert vm1 is not None and vm1.state == InstanceState.STOPPED
    assert fresh[vms["vm-2"].instance_id] is None
    assert fresh[vms["vm-3"].instance_id] is None
    # one aggregatedList filtered by the four names (two pages of two), no per-VM get
    assert fake.compute.calls == {"GET aggregated_list": 2}


def test_a_vm_started_again_is_described_as_relaunched_and_the_recheck_refuses_it(
    fake: FakeGcp, fleet: tuple[GcpProvider, dict[str, Instance]]
) -> None:
    # the batched re-check reads lastStartTimestamp (its fields carry it): a VM stopped and
    # started since the listing is not the run costguard decided about
    from costguard.actions.safety import skip_reason

    provider, vms = fleet
    again = datetime(2026, 11, 29, 6, 30, tzinfo=UTC)
    fake.compute.instance("ml-prod", ZONES[1], "vm-1").last_start = again
    fresh = provider.describe_many([vms["vm-0"], vms["vm-1"]])
    vm0, vm1 = fresh[vms["vm-0"].instance_id], fresh[vms["vm-1"].instance_id]
    assert vm0 is not None and vm1 is not None and vm1.launch_time == again
    assert skip_reason(vms["vm-0"], vm0, again) is None
    assert skip_reason(vms["vm-1"], vm1, again) == (
        f"changed meanwhile: relaunched at {again.isoformat()} "
        f"(was {vms['vm-1'].launch_time.isoformat()})")


def test_describe_many_of_one_vm_is_one_get_and_a_404_is_gone(
    fake: FakeGcp, fleet: tuple[GcpProvider, dict[str, Instance]]
) -> None:
    provider, vms = fleet
    assert provider.describe_many([vms["vm-0"]])[vms["vm-0"].instance_id] is not None
    fake.compute.inject(404, times=1, path_contains="/instances/vm-1")
    assert provider.describe_many([vms["vm-1"]]) == {vms["vm-1"].instance_id: None}
    assert fake.compute.calls == {"GET get": 1, "GET injected-404": 1}


def test_a_failed_listing_falls_back_to_gets_and_raises_for_an_unreadable_vm(
    fake: FakeGcp, fleet: tuple[GcpProvider, dict[str, Instance]]
) -> None:
    provider, vms = fleet
    fake.compute.inject(403, times=1, path_contains="/aggregated/instances")
    fresh = provider.describe_many([vms["vm-0"], vms["vm-1"]])
    assert all(v is not None for v in fresh.values())  # not "gone" because unlisted
    assert fake.compute.calls == {"GET injected-403": 1, "GET get": 2}

    fake.compute.inject(403, times=1, path_contains="/aggregated/instances")
    fake.compute.inject(403, times=5, path_contains="/instances/vm-4")
    with pytest.raises(ProviderError, match="permission denied"):
        provider.describe_many(list(vms.values()))


def test_describe_many_splits_many_names_over_several_filters(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider], monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(40):
        fake.compute.add_instance("ml-prod", ZONES[i % 3], f"big-{i:02d}", "g2-standard-4")
    fake.compute.add_instance("ml-prod", ZONES[1], "big-00", "g2-standard-4")  # other zone
    provider = make_provider(page_size=500)
    listed = [i for i in provider.list_instances().instances
              if (i.name, i.zone) != ("big-00", ZONES[1])]
    assert len(listed) == 40
    monkeypatch.setattr(lookup, "FILTER_CHARS", 70)  # 10 names of 6 characters per filter
    fake.compute.calls.clear()
    fresh = provider.describe_many(listed)
    assert fake.compute.calls == {"GET aggregated_list": 4}
    assert all(fresh[i.instance_id] is not None for i in listed)
    assert {(i.name, i.zone) for i in listed} == {
        (f.name, f.zone) for f in fresh.values() if f is not None}


def test_name_filters_are_regex_alternations_within_the_size_limit() -> None:
    assert lookup.name_filters(["b", "a", "b"]) == ['name eq "(a|b)"']
    filters = lookup.name_filters([f"vm-{i:03d}" for i in range(100)], max_chars=80)
    assert len(filters) == 10 and all(len(f) < 80 + 12 for f in filters)
    assert not lookup.filterable("Bad_Name") and lookup.filterable("vm-1")


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
    assert waited(fake.compute.calls) >= 4
    # the read-back: one listing filtered by the four names (two pages of two), no get;
    # then one disks listing (two pages) for what the stopped VMs still cost
    assert fake.compute.calls["GET aggregated_list"] == 2
    assert fake.compute.calls["GET get"] == 0
    assert fake.compute.calls["GET disk_aggregated_list"] == 2


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
        if method == "GET" and path.endswith("/aggregated/instances"):
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


def test_set_tags_many_relabels_with_the_fingerprints_describe_many_just_read(
    fake: FakeGcp, fleet: tuple[GcpProvider, dict[str, Instance]], clock: ManualClock
) -> None:
    provider, vms = fleet
    targets = [vms[f"vm-{i}"] for i in range(4)]
    provider.describe_many(targets)  # the batched path's re-check before tagging
    fake.compute.relabel("ml-prod", ZONES[1], "vm-1", {"owner": "ana"})  # after our read
    fake.compute.calls.clear()

    results = provider.set_tags_many(targets, {"team": "vision"}, dry_run=False)

    assert {r.outcome for r in results.values()} == {ActionOutcome.DONE}
    # no get before setLabels; vm-1's stale fingerprint got a 412, a re-read and a retry
    assert without_batches(fake.compute.calls) == {"POST set_labels": 5, "GET get": 1}
    assert fake.compute.instance("ml-prod", ZONES[1], "vm-1").labels == {
        "owner": "ana", "team": "vision"}

    provider.describe_many(targets)
    clock.advance(timedelta(minutes=2))  # too old to stand in for a read: read again
    fake.compute.calls.clear()
    provider.set_tags_many(targets, {"team": "nlp"}, dry_run=False)
    assert without_batches(fake.compute.calls) == {"GET get": 4, "POST set_labels": 4}


def test_set_tags_many_reports_a_vm_recreated_since_the_read(
    fake: FakeGcp, fleet: tuple[GcpProvider, dict[str, Instance]]
) -> None:
    provider, vms = fleet
    targets = [vms["vm-0"], vms["vm-3"]]
    provider.describe_many(targets)
    fake.compute.remove_instance("ml-prod", ZONES[0], "vm-3")
    new = fake.compute.add_instance("ml-prod", ZONES[0], "vm-3", "a2-highgpu-1g")
    # the same (no) labels, so the same fingerprint: setLabels by name reaches the new VM,
    # and its operation says so
    results = provider.set_tags_many(targets, {"team": "vision"}, dry_run=False)
    assert results[vms["vm-0"].instance_id].outcome == ActionOutcome.DONE
    recreated = results[vms["vm-3"].instance_id]
    assert recreated.outcome == ActionOutcome.FAILED
    assert f"recreated (id {new.id}" in recreated.detail


def test_an_unreachable_zone_in_the_listing_means_gets_not_gone(
    fake: FakeGcp, fleet: tuple[GcpProvider, dict[str, Instance]]
) -> None:
    provider, vms = fleet
    fake.compute.unreachable_zones.add(ZONES[1])  # vm-1 and vm-4 are not listed
    fresh = provider.describe_many([vms["vm-0"], vms["vm-1"], vms["vm-4"]])
    assert all(fresh[vms[n].instance_id] is not None for n in ("vm-0", "vm-1", "vm-4"))
    assert fake.compute.calls == {"GET aggregated_list": 1, "GET get": 3}
    # the inventory reports the zone as a gap, not as a smaller fleet
    gaps = provider.list_instances().gaps
    assert [g.scope for g in gaps] == [f"ml-prod/zones/{ZONES[1]}"]
