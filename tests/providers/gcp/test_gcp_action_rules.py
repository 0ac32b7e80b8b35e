"""The GCP stop path's rules one at a time, through the real client against the fake: what
each result says and reports as the state after, request ids, retries, operation errors and
time-outs, label rules (found by mutation testing: see MUTATION.md)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from costguard.demo.gcp_fake.server import FakeGcp
from costguard.errors import ProviderError, ProviderThrottled
from costguard.model import ActionOutcome, Instance, InstanceState
from costguard.providers.gcp import GcpProvider
from costguard.providers.gcp.actions import label_key, label_value

PROJECT, ZONE, NAME = "ml-prod", "us-central1-a", "idle-a100"
SCOPE = f"{PROJECT}/{ZONE}/{NAME}"


def _listed(provider: GcpProvider) -> Instance:
    found: Instance = next(i for i in provider.list_instances().instances if i.name == NAME)
    return found


@pytest.fixture
def gcp(fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> GcpProvider:
    fake.compute.add_instance(PROJECT, ZONE, NAME, "a2-highgpu-1g")
    return make_provider()


@pytest.fixture
def inst(gcp: GcpProvider) -> Instance:
    return _listed(gcp)


def test_done_names_the_operation_and_the_state_after(
    fake: FakeGcp, gcp: GcpProvider, inst: Instance,
) -> None:
    stopped = gcp.stop(inst, dry_run=False)
    assert (stopped.outcome, stopped.detail, stopped.state_after) == (
        ActionOutcome.DONE, f"stop {NAME}: operation operation-1-stop done",
        InstanceState.STOPPED)
    started = gcp.start(inst, dry_run=False)
    assert (started.outcome, started.detail, started.state_after) == (
        ActionOutcome.DONE, f"start {NAME}: operation operation-2-start done",
        InstanceState.RUNNING)


def test_every_mutation_carries_a_request_id_of_its_own(
    fake: FakeGcp, gcp: GcpProvider, inst: Instance,
) -> None:
    # GCE runs a request id once: a shared or missing id would drop or double a call
    gcp.stop(inst, dry_run=False)
    gcp.start(inst, dry_run=False)
    gcp.set_tags(inst, {"owner": "ana"}, dry_run=False)
    ids = fake.compute.request_ids
    assert len(ids) == len(set(ids)) == 3
    assert all(uuid.UUID(i).version == 4 for i in ids)
    assert fake.compute.calls["POST stop"] == fake.compute.calls["POST start"] == 1


@pytest.mark.parametrize("path", ["/start", "/setLabels", "/wait"])
def test_start_relabel_and_the_wait_retry_a_503(
    fake: FakeGcp, gcp: GcpProvider, inst: Instance, path: str,
) -> None:
    fake.compute.set_status(PROJECT, ZONE, NAME, "TERMINATED")
    fake.compute.operation_delay_s = 0.2  # the wait has to ask
    fake.compute.inject(503, times=1, path_contains=path)
    assert gcp.start(inst, dry_run=False).outcome is ActionOutcome.DONE
    assert gcp.set_tags(inst, {"owner": "ana"}, dry_run=False).outcome is ActionOutcome.DONE
    assert fake.compute.calls["POST injected-503"] == 1


@pytest.mark.parametrize("verb", ["stop", "setLabels"])
def test_an_operation_ending_in_error_fails_with_gces_errors_and_the_state(
    fake: FakeGcp, gcp: GcpProvider, inst: Instance, verb: str,
) -> None:
    fake.compute.failing_operations[verb] = (
        ("ZONE_RESOURCE_POOL_EXHAUSTED", "no capacity"), ("QUOTA_EXCEEDED", "over quota"))
    if verb == "stop":
        result = gcp.stop(inst, dry_run=False)
    else:
        result = gcp.set_tags(inst, {"owner": "ana"}, dry_run=False)
    assert (result.outcome, result.detail, result.state_after) == (
        ActionOutcome.FAILED,
        "ZONE_RESOURCE_POOL_EXHAUSTED: no capacity; QUOTA_EXCEEDED: over quota",
        InstanceState.RUNNING)


def test_an_operation_that_never_finishes_times_out_retryably(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider],
) -> None:
    fake.compute.add_instance(PROJECT, ZONE, NAME, "a2-highgpu-1g")
    fake.compute.operation_delay_s, fake.compute.max_wait_s = 60.0, 0.2
    gcp = make_provider(operation_timeout_s=0.6)
    with pytest.raises(ProviderError) as late:
        gcp.stop(_listed(gcp), dry_run=False)
    assert (str(late.value), late.value.retryable) == (
        f"gcp {SCOPE}: operation operation-1-stop not done after 1 s", True)
    assert fake.compute.calls["POST operation_wait"] >= 2


@pytest.mark.parametrize("path", ["/stop", "/setLabels"])
def test_a_refused_or_exhausted_call_raises_with_the_scope(
    fake: FakeGcp, make_provider: Callable[..., GcpProvider], path: str,
) -> None:
    fake.compute.add_instance(PROJECT, ZONE, NAME, "a2-highgpu-1g")
    gcp = make_provider(retry={"initial_s": 0.01, "maximum_s": 0.02, "deadline_s": 0.2})
    inst = _listed(gcp)

    def act() -> None:
        if path == "/stop":
            gcp.stop(inst, dry_run=False)
        else:
            gcp.set_tags(inst, {"owner": "ana"}, dry_run=False)

    fake.compute.inject(400, times=1, path_contains=path)
    with pytest.raises(ProviderError, match=f"^gcp {SCOPE}: ") as refused:
        act()
    assert "injected failure" in str(refused.value)
    fake.compute.inject(429, times=10_000, path_contains=path)
    with pytest.raises(ProviderThrottled, match=f"^gcp {SCOPE}: gave up after retries: "):
        act()


def test_skipped_and_dry_results_report_the_state_seen(
    fake: FakeGcp, gcp: GcpProvider, inst: Instance,
) -> None:
    dry = gcp.stop(inst, dry_run=True)
    assert (dry.detail, dry.state_after) == (
        f"would stop {NAME} (a2-highgpu-1g, RUNNING) in {ZONE} of project {PROJECT}",
        InstanceState.RUNNING)
    fake.compute.set_status(PROJECT, ZONE, NAME, "TERMINATED")
    not_now = gcp.stop(inst, dry_run=False)
    assert (not_now.outcome, not_now.detail, not_now.state_after) == (
        ActionOutcome.SKIPPED, f"{NAME} is TERMINATED now, not stop-able; nothing done",
        InstanceState.STOPPED)
    fake.compute.add_instance(PROJECT, ZONE, NAME, "a2-highgpu-1g", status="TERMINATED")
    recreated = gcp.start(inst, dry_run=False)
    assert (recreated.outcome, recreated.state_after) == (
        ActionOutcome.SKIPPED, InstanceState.STOPPED)
    assert recreated.detail.startswith(f"{NAME} was recreated (id ")
    assert recreated.detail.endswith(f", expected {inst.instance_id})")


def test_a_vm_without_zone_or_name_is_not_acted_on(gcp: GcpProvider, inst: Instance) -> None:
    for missing in ({"zone": None}, {"name": None}):
        with pytest.raises(ProviderError) as failed:
            gcp.stop(inst.model_copy(update=missing), dry_run=False)
        assert str(failed.value) == (
            f"gcp {PROJECT}: instance {inst.instance_id} has no zone/name; re-run inventory "
            "before acting")


def test_labels_of_a_recreated_vm_are_left_alone(
    fake: FakeGcp, gcp: GcpProvider, inst: Instance,
) -> None:
    fake.compute.add_instance(PROJECT, ZONE, NAME, "a2-highgpu-1g")
    result = gcp.set_tags(inst, {"owner": "ana"}, dry_run=False)
    assert result.outcome is ActionOutcome.SKIPPED
    assert result.detail.startswith(f"{NAME} was recreated (id ")
    assert fake.compute.calls["POST set_labels"] == 0


def test_labels_already_as_wanted_change_nothing_dry_or_not(
    fake: FakeGcp, gcp: GcpProvider, inst: Instance,
) -> None:
    fake.compute.relabel(PROJECT, ZONE, NAME, {"owner": "ana"})
    for dry_run, outcome in ((True, ActionOutcome.DRY_RUN), (False, ActionOutcome.DONE)):
        result = gcp.set_tags(inst, {"owner": "ana"}, remove=["gone"], dry_run=dry_run)
        assert (result.outcome, result.detail, result.state_after) == (
            outcome, f"labels of {NAME} already as wanted; nothing to change",
            InstanceState.RUNNING)
    assert fake.compute.calls["POST set_labels"] == 0


def test_relabelling_says_only_what_changes_and_the_state(
    fake: FakeGcp, gcp: GcpProvider, inst: Instance,
) -> None:
    fake.compute.relabel(PROJECT, ZONE, NAME, {"team": "x", "old": "1", "owner": "bo"})
    fake.compute.set_status(PROJECT, ZONE, NAME, "TERMINATED")
    change = {"team": "x", "owner": "ana", "env": "prod"}
    dry = gcp.set_tags(inst, change, remove=["old"], dry_run=True)
    assert (dry.outcome, dry.detail, dry.state_after) == (
        ActionOutcome.DRY_RUN, f"would set labels of {NAME}: +env=prod, +owner=ana, -old",
        InstanceState.STOPPED)
    done = gcp.set_tags(inst, change, remove=["old"], dry_run=False)
    assert (done.outcome, done.detail, done.state_after) == (
        ActionOutcome.DONE, f"labels of {NAME}: +env=prod, +owner=ana, -old",
        InstanceState.STOPPED)


def test_labels_that_keep_changing_give_up_after_four_tries(
    fake: FakeGcp, gcp: GcpProvider, inst: Instance,
) -> None:
    writes = iter(range(100))

    def someone_else_relabels(method: str, path: str) -> None:
        if path.endswith("/setLabels"):  # a new fingerprint before each of our writes
            fake.compute.relabel(PROJECT, ZONE, NAME, {"n": str(next(writes))})

    fake.compute.on_request = someone_else_relabels
    result = gcp.set_tags(inst, {"owner": "ana"}, dry_run=False)
    assert (result.outcome, result.detail) == (
        ActionOutcome.FAILED, f"labels of {NAME} kept changing under us (4 tries, HTTP 412)")
    assert fake.compute.calls["POST set_labels"] == 4


def test_label_keys_and_values_fit_gces_rules() -> None:
    assert label_key("costguard:warned-at") == "costguard_warned-at"
    assert label_key("9lives") == "k9lives"
    assert label_key("a1") == "a1"
    assert label_key("x" * 70) == "x" * 63
    assert label_key("1" + "x" * 70) == "k1" + "x" * 61
    assert label_value("2026-11-23T12:00Z") == "2026-11-23t12_00z"
    assert label_value("V" * 70) == "v" * 63


def test_a_dry_run_start_reads_and_starts_nothing(
    fake: FakeGcp, gcp: GcpProvider, inst: Instance,
) -> None:
    fake.compute.set_status(PROJECT, ZONE, NAME, "TERMINATED")
    result = gcp.start(inst, dry_run=True)
    assert (result.outcome, result.detail, result.state_after) == (
        ActionOutcome.DRY_RUN,
        f"would start {NAME} (a2-highgpu-1g, TERMINATED) in {ZONE} of project {PROJECT}",
        InstanceState.STOPPED)
    assert fake.compute.instance(PROJECT, ZONE, NAME).status == "TERMINATED"
    assert fake.compute.calls["POST start"] == 0
