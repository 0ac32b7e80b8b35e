"""Vertex AI Workbench instances: the real `google-cloud-notebooks` client over REST against
the fake's Notebooks API v2 (shapes from the v2 REST reference). A Workbench instance's VM
is listed as a notebook (by the listing, or by Google's label when the listing cannot be
read), priced and read as the VM it is, stopped, started and labelled through the Notebooks
API only, and never as a VM that was recreated under its name."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from costguard.demo.gcp_fake.server import FakeGcp
from costguard.errors import ProviderError
from costguard.model import ActionOutcome, InstanceKind, InstanceState
from costguard.providers.gcp import GcpProvider

P, Z = "ml-prod", "us-central1-a"


def _governing(provider: GcpProvider) -> GcpProvider:
    """The provider as the engine leaves it when a notebook policy names GCP."""
    provider.govern(frozenset({"instance", "notebook"}))
    return provider


def test_a_workbench_vm_is_a_notebook_with_its_instance_labels(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    fake.compute.add_instance(P, Z, "plain-vm", "g2-standard-8")
    fake.compute.add_workbench(P, Z, "ana-nb", "g2-standard-8",
                               accelerators=[("NVIDIA_L4", 1)],
                               labels={"team": "research", "owner": "ana"})
    fake.compute.add_workbench(P, "us-central1-b", "quiet-nb", "n1-standard-4",
                               state="STOPPED", vm_label=False)
    inv = _governing(make_provider()).list_instances()
    assert inv.gaps == []
    by_name = {i.name: i for i in inv.instances}
    assert set(by_name) == {"plain-vm", "ana-nb", "quiet-nb"}
    assert by_name["plain-vm"].kind is InstanceKind.INSTANCE
    nb = by_name["ana-nb"]
    assert (nb.kind, nb.instance_type, nb.gpu_count, nb.gpu_model, nb.state) == (
        InstanceKind.NOTEBOOK, "g2-standard-8", 1, "L4", InstanceState.RUNNING)
    # the VM's own id (what the agent's identity token proves), the instance's labels
    assert nb.instance_id == str(fake.compute.instance(P, Z, "ana-nb").id)
    assert nb.tags["team"] == "research" and nb.tags["owner"] == "ana"
    # found by the listing alone, without Google's label on its VM
    quiet = by_name["quiet-nb"]
    assert (quiet.kind, quiet.state) == (InstanceKind.NOTEBOOK, InstanceState.STOPPED)
    assert fake.compute.calls["GET workbench_list"] == 1


def test_a_notebook_is_stopped_started_and_labelled_through_the_notebooks_api(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    fake.compute.add_workbench(P, Z, "ana-nb", accelerators=[("NVIDIA_L4", 1)])
    provider = _governing(make_provider())
    nb = provider.list_instances().instances[0]
    dry = provider.stop(nb, dry_run=True)
    assert dry.outcome is ActionOutcome.DRY_RUN and "would stop Workbench instance ana-nb" \
        in dry.detail
    assert fake.compute.workbench(P, Z, "ana-nb").state == "ACTIVE"
    done = provider.stop_many([nb], dry_run=False)[nb.instance_id]
    assert done.outcome is ActionOutcome.DONE and done.state_after is InstanceState.STOPPED
    bench = fake.compute.workbench(P, Z, "ana-nb")
    assert (bench.state, bench.vm.status) == ("STOPPED", "TERMINATED")
    # never the VM's own stop: that would leave the Workbench instance out of step
    assert fake.compute.calls["POST stop"] == 0 and fake.compute.calls["POST workbench_stop"] == 1
    again = provider.stop(nb, dry_run=False)
    assert again.outcome is ActionOutcome.SKIPPED and "STOPPED now, not ACTIVE" in again.detail
    assert provider.start(nb, dry_run=False).outcome is ActionOutcome.DONE
    assert fake.compute.workbench(P, Z, "ana-nb").state == "ACTIVE"
    labelled = provider.set_tags_many([nb], {"costguard-idle": "yes"}, dry_run=False)
    assert labelled[nb.instance_id].outcome is ActionOutcome.DONE
    assert fake.compute.workbench(P, Z, "ana-nb").labels == {"costguard-idle": "yes"}
    assert fake.compute.calls["POST setLabels"] == 0


def test_the_recheck_reads_the_workbench_labels_again(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    fake.compute.add_workbench(P, Z, "ana-nb")
    provider = _governing(make_provider())
    nb = provider.list_instances().instances[0]
    fake.compute.workbench(P, Z, "ana-nb").labels["costguard-protect"] = "true"
    fresh = provider.describe_many([nb])[nb.instance_id]
    assert fresh is not None and fresh.kind is InstanceKind.NOTEBOOK
    assert fresh.tags["costguard-protect"] == "true"


def test_a_vm_recreated_under_the_notebooks_name_is_left_alone(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    fake.compute.add_workbench(P, Z, "ana-nb")
    provider = _governing(make_provider())
    nb = provider.list_instances().instances[0]
    fake.compute.add_workbench(P, Z, "ana-nb")  # deleted and made again: a new VM id
    result = provider.stop(nb, dry_run=False)
    assert result.outcome is ActionOutcome.SKIPPED and "recreated" in result.detail
    assert fake.compute.calls["POST workbench_stop"] == 0


def test_an_unreadable_listing_is_a_gap_and_googles_label_still_marks_notebooks(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    fake.compute.add_workbench(P, Z, "ana-nb")
    fake.compute.inject(400, times=1, path_contains="/locations/-/instances")
    inv = _governing(make_provider()).list_instances()
    assert [g.scope for g in inv.gaps] == [f"{P}/workbench"]
    assert [(i.name, i.kind) for i in inv.instances] == [("ana-nb", InstanceKind.NOTEBOOK)]


def test_a_disabled_api_or_a_role_without_the_right_lists_no_workbench_and_no_gap(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    fake.compute.add_workbench(P, Z, "labelled-nb")
    fake.compute.add_workbench(P, Z, "bare-nb", vm_label=False)
    for held in (fake.compute.workbench_disabled, fake.compute.workbench_denied):
        held.add(P)
        inv = _governing(make_provider()).list_instances()
        assert inv.gaps == []
        assert {i.name: i.kind for i in inv.instances} == {
            "labelled-nb": InstanceKind.NOTEBOOK, "bare-nb": InstanceKind.INSTANCE}
        held.clear()


def test_workbench_false_lists_nothing_from_the_notebooks_api_and_acts_on_no_notebook(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    fake.compute.add_workbench(P, Z, "ana-nb")
    provider = _governing(make_provider(workbench=False))
    nb = provider.list_instances().instances[0]
    assert nb.kind is InstanceKind.NOTEBOOK  # Google's label
    assert fake.compute.calls["GET workbench_list"] == 0
    with pytest.raises(ProviderError, match=r"providers\.gcp\.workbench is false"):
        provider.stop(nb, dry_run=False)  # the runner records it as failed
    # its re-check still reads it (a batch of re-checks is not failed by it), as a notebook
    fresh = provider.describe_many([nb])[nb.instance_id]
    assert fresh is not None and fresh.kind is InstanceKind.NOTEBOOK
    assert fake.compute.workbench(P, Z, "ana-nb").state == "ACTIVE"


def test_without_a_notebook_policy_the_listing_is_not_made_and_the_label_still_counts(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    fake.compute.add_workbench(P, Z, "labelled-nb")
    fake.compute.add_workbench(P, Z, "bare-nb", vm_label=False)
    inv = make_provider().list_instances()
    assert fake.compute.calls["GET workbench_list"] == 0
    # an instance policy still never meets a notebook's VM that Google labelled
    assert {i.name: i.kind for i in inv.instances} == {
        "labelled-nb": InstanceKind.NOTEBOOK, "bare-nb": InstanceKind.INSTANCE}


def test_a_state_newer_than_the_client_is_pending_never_acted_on() -> None:
    from types import SimpleNamespace

    from costguard.providers.gcp.workbench import STATES, state_name

    assert state_name(SimpleNamespace(state=3)) == "ACTIVE"
    newer = state_name(SimpleNamespace(state=4242))
    assert newer == "STATE_UNSPECIFIED" and newer not in STATES  # pending: not stop-able
