"""Stop / start / setLabels through real *_unary calls and zone operations on the fake."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from costguard.demo.gcp_fake.server import FakeGcp
from costguard.errors import ProviderThrottled
from costguard.model import ActionOutcome, Instance, InstanceState
from costguard.providers.gcp import GcpProvider, label_key


def _listed(provider: GcpProvider, name: str) -> Instance:
    found: Instance = next(i for i in provider.list_instances().instances if i.name == name)
    return found


@pytest.fixture
def gcp(fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> GcpProvider:
    fake.compute.add_instance("ml-prod", "us-central1-a", "idle-a100", "a2-highgpu-1g")
    return make_provider()


def test_stop_waits_for_the_operation_and_reports_the_stopped_state(
    fake: FakeGcp, gcp: GcpProvider
) -> None:
    fake.compute.operation_delay_s = 0.3  # operations complete later: wait must poll
    inst = _listed(gcp, "idle-a100")
    result = gcp.stop(inst, dry_run=False)
    assert result.outcome == ActionOutcome.DONE
    assert result.state_after == InstanceState.STOPPED
    assert fake.compute.instance("ml-prod", "us-central1-a", "idle-a100").status == "TERMINATED"
    assert fake.compute.calls["POST stop"] == 1
    assert fake.compute.calls["POST operation_wait"] >= 1


def test_start_brings_a_stopped_instance_back(fake: FakeGcp, gcp: GcpProvider) -> None:
    fake.compute.set_status("ml-prod", "us-central1-a", "idle-a100", "TERMINATED")
    result = gcp.start(_listed(gcp, "idle-a100"), dry_run=False)
    assert result.outcome == ActionOutcome.DONE
    assert result.state_after == InstanceState.RUNNING


def test_dry_run_reads_the_instance_and_changes_nothing(fake: FakeGcp, gcp: GcpProvider) -> None:
    result = gcp.stop(_listed(gcp, "idle-a100"), dry_run=True)
    assert result.outcome == ActionOutcome.DRY_RUN
    assert "would stop idle-a100 (a2-highgpu-1g, RUNNING) in us-central1-a" in result.detail
    assert fake.compute.instance("ml-prod", "us-central1-a", "idle-a100").status == "RUNNING"
    assert fake.compute.calls["POST stop"] == 0
    assert fake.compute.calls["GET get"] == 1


def test_stop_is_skipped_when_the_instance_changed_since_inventory(
    fake: FakeGcp, gcp: GcpProvider
) -> None:
    inst = _listed(gcp, "idle-a100")
    fake.compute.set_status("ml-prod", "us-central1-a", "idle-a100", "TERMINATED")
    result = gcp.stop(inst, dry_run=False)
    assert result.outcome == ActionOutcome.SKIPPED
    assert "TERMINATED" in result.detail
    assert fake.compute.calls["POST stop"] == 0


def test_stop_is_skipped_when_the_vm_was_started_again_since_inventory(
    fake: FakeGcp, gcp: GcpProvider
) -> None:
    # stopped and started again between the listing and the stop (its owner came back):
    # not the idle run costguard decided about; a label still goes on
    inst = _listed(gcp, "idle-a100")
    c = fake.compute
    c.now = lambda: datetime(2026, 11, 29, 6, 30, tzinfo=UTC)
    assert gcp.stop(inst, dry_run=False).outcome == ActionOutcome.DONE
    assert gcp.start(_listed(gcp, "idle-a100"), dry_run=False).outcome == ActionOutcome.DONE
    result = gcp.stop(inst, dry_run=False)
    assert result.outcome == ActionOutcome.SKIPPED
    assert result.detail == ("changed meanwhile: started again at 2026-11-29T06:30:00+00:00 "
                             f"(was {inst.launch_time.isoformat()})")
    assert c.instance("ml-prod", "us-central1-a", "idle-a100").status == "RUNNING"
    assert c.calls["POST stop"] == 1
    assert gcp.set_tags(inst, {"team": "nlp"}, dry_run=False).outcome == ActionOutcome.DONE
    # the instance as listed now is the one to act on
    again = gcp.stop(_listed(gcp, "idle-a100"), dry_run=False)
    assert again.outcome == ActionOutcome.DONE


@pytest.mark.parametrize(("last_start", "why"), [
    ("", None),  # never started: not started again
    ("not a time", None),  # unreadable: as the listing read it, no start to tell apart
    ("2026-11-29T06:00:00.000+00:00", None),
    ("2026-11-29T06:00:01.000+00:00", None),  # within a second: the same start
    ("2026-11-29T05:59:59.000+00:00", None),
    ("2026-11-29T01:00:01.500-05:00", "changed meanwhile: started again at "
                                      "2026-11-29T06:00:01.500000+00:00 "
                                      "(was 2026-11-29T06:00:00+00:00)"),
    ("2026-11-29T05:59:58.500+00:00", "changed meanwhile: started again at "
                                      "2026-11-29T05:59:58.500000+00:00 "
                                      "(was 2026-11-29T06:00:00+00:00)"),
])
def test_a_vm_started_again_is_told_from_the_same_start(last_start: str, why: str | None
                                                        ) -> None:
    from costguard.providers.gcp import compute as compute_v1
    from costguard.providers.gcp.actions import changed, recreated

    seen = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)
    inst = Instance(provider="gcp", account="p", region="us-central1", zone="us-central1-a",
                    instance_id="42", name="vm", instance_type="a2-highgpu-1g",
                    state=InstanceState.RUNNING, launch_time=seen, observed_at=seen)
    vm = compute_v1.Instance(id=42, name="vm", last_start_timestamp=last_start,
                             creation_timestamp="2026-01-01T00:00:00.000+00:00")
    assert changed(inst, vm) == why
    assert recreated(inst, vm) is None  # a label goes on whenever it started
    other = compute_v1.Instance(id=43, name="vm", last_start_timestamp=last_start)
    assert changed(inst, other) == recreated(inst, other) == "vm was recreated (id 43, expected 42)"


def test_stop_is_skipped_when_the_name_now_belongs_to_a_new_instance(
    fake: FakeGcp, gcp: GcpProvider
) -> None:
    inst = _listed(gcp, "idle-a100")
    fake.compute.add_instance("ml-prod", "us-central1-a", "idle-a100", "a2-highgpu-1g")
    result = gcp.stop(inst, dry_run=False)
    assert result.outcome == ActionOutcome.SKIPPED
    assert "recreated" in result.detail
    assert fake.compute.calls["POST stop"] == 0


def test_stop_retries_429_and_503_then_succeeds(fake: FakeGcp, gcp: GcpProvider) -> None:
    inst = _listed(gcp, "idle-a100")
    fake.compute.inject(429, times=2, path_contains="/stop")
    fake.compute.inject(503, times=1, path_contains="/stop")
    result = gcp.stop(inst, dry_run=False)
    assert result.outcome == ActionOutcome.DONE
    assert fake.compute.calls["POST injected-429"] == 2
    assert fake.compute.calls["POST injected-503"] == 1
    assert fake.compute.calls["POST stop"] == 1


def test_endless_throttling_raises_a_costguard_error_not_an_sdk_error(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider]
) -> None:
    fake.compute.add_instance("ml-prod", "us-central1-a", "vm")
    gcp = make_provider(retry={"initial_s": 0.01, "maximum_s": 0.02, "deadline_s": 0.2})
    inst = _listed(gcp, "vm")
    fake.compute.inject(429, times=10_000, path_contains="/instances/vm")
    with pytest.raises(ProviderThrottled, match="gave up after retries: throttled"):
        gcp.stop(inst, dry_run=False)


def test_set_labels_merges_and_removes_keys(fake: FakeGcp, gcp: GcpProvider) -> None:
    fake.compute.relabel("ml-prod", "us-central1-a", "idle-a100", {"team": "x", "old": "1"})
    result = gcp.set_tags(
        _listed(gcp, "idle-a100"),
        {"costguard:warned": "2026-11-23T12:00Z"},
        remove=["old"],
        dry_run=False,
    )
    assert result.outcome == ActionOutcome.DONE
    labels = fake.compute.instance("ml-prod", "us-central1-a", "idle-a100").labels
    assert labels == {"team": "x", "costguard_warned": "2026-11-23t12_00z"}
    assert label_key("costguard:warned") == "costguard_warned"


def test_set_labels_rereads_and_retries_when_the_fingerprint_moved(
    fake: FakeGcp, gcp: GcpProvider
) -> None:
    inst = _listed(gcp, "idle-a100")
    raced: list[str] = []

    def someone_else_relabels(method: str, path: str) -> None:
        if path.endswith("/setLabels") and not raced:
            raced.append(path)
            fake.compute.relabel("ml-prod", "us-central1-a", "idle-a100", {"owner": "ana"})

    fake.compute.on_request = someone_else_relabels
    result = gcp.set_tags(inst, {"costguard-state": "warned"}, dry_run=False)
    assert result.outcome == ActionOutcome.DONE
    assert fake.compute.calls["POST set_labels"] == 2  # 412 first, then success
    labels = fake.compute.instance("ml-prod", "us-central1-a", "idle-a100").labels
    assert labels == {"owner": "ana", "costguard-state": "warned"}  # the other writer survives


def test_set_labels_dry_run_says_what_would_change(fake: FakeGcp, gcp: GcpProvider) -> None:
    result = gcp.set_tags(_listed(gcp, "idle-a100"), {"owner": "bo"}, dry_run=True)
    assert result.outcome == ActionOutcome.DRY_RUN
    assert "+owner=bo" in result.detail
    assert fake.compute.instance("ml-prod", "us-central1-a", "idle-a100").labels == {}
    assert fake.compute.calls["POST set_labels"] == 0


@pytest.mark.parametrize("action", ["stop", "setLabels"])
def test_a_connection_reset_mid_call_is_retried_not_a_crash(
    fake: FakeGcp, gcp: GcpProvider, action: str
) -> None:
    """A connection dropped under a call (the REST transport raises requests' own error) is
    retried like a 503: the mutation carries a requestId, so it is applied once. It used to
    escape the provider and end the cycle."""
    from costguard.demo.gcp_fake.http import RESET

    inst = _listed(gcp, "idle-a100")
    fake.compute.inject(RESET, times=1, path_contains=f"/idle-a100/{action}")
    if action == "stop":
        result = gcp.stop(inst, dry_run=False)
        assert fake.compute.instance("ml-prod", "us-central1-a", "idle-a100").status == (
            "TERMINATED")
    else:
        result = gcp.set_tags(inst, {"team": "nlp"}, dry_run=False)
        assert fake.compute.instance("ml-prod", "us-central1-a", "idle-a100").labels == {
            "team": "nlp"}
    assert result.outcome == ActionOutcome.DONE
    assert fake.compute.calls["POST injected-0"] == 1
    assert len(fake.compute.request_ids) == 1
