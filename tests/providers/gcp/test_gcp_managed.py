"""Managed instance groups through the real google-cloud-compute client against the local
Compute fake: members read as their group's (created-by metadata; sizes from one
instanceGroupManagers and one autoscalers aggregatedList per project), scale-in by
deleteInstances (zonal and regional) never below the autoscaler's minimum, and no stop or
delete call ever names a member."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from costguard.demo.gcp_fake.server import FakeGcp
from costguard.model import AT_MINIMUM, ActionOutcome, Instance, OwnerKind
from costguard.providers.gcp import GcpProvider

P, Z = "ml-prod", "us-central1-a"


def _listed(provider: GcpProvider) -> dict[str, Instance]:
    return {i.name or "": i for i in provider.list_instances().instances}


def test_members_of_zonal_and_regional_groups_and_gke_nodes_are_read_as_owned(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    zonal = fake.compute.add_mig(P, "infer", zone=Z, size=3, autoscaler=(1, 6))
    regional = fake.compute.add_mig(P, "batch", zone=Z, size=2, regional=True)
    fake.compute.add_mig(P, "gke-ml-gpu-pool-grp", zone=Z, size=2, labels={
        "goog-k8s-cluster-name": "ml", "goog-k8s-node-pool-name": "gpu-pool"})
    fake.compute.add_instance(P, Z, "pet", "g2-standard-4")
    listed = _listed(make_provider())
    assert listed["pet"].owner is None
    for name in zonal.members:
        owner = listed[name].owner
        assert owner is not None and (owner.kind, owner.name, owner.scope) == (
            OwnerKind.MIG, "infer", Z)
        assert (owner.desired, owner.min_size, owner.max_size) == (3, 1, 6)
        assert owner.via == "metadata created-by"
    for name in regional.members:
        owner = listed[name].owner
        assert owner is not None and owner.scope == "us-central1"
        assert (owner.desired, owner.min_size, owner.max_size) == (2, 0, None)
    gke = [i for i in listed.values() if i.owner and i.owner.kind is OwnerKind.GKE]
    assert len(gke) == 2 and {i.owner.cluster for i in gke if i.owner} == {"ml"}
    assert fake.compute.calls["GET mig_aggregated"] == 1
    assert fake.compute.calls["GET autoscaler_aggregated"] == 1


def test_a_project_without_groups_makes_no_group_calls(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    fake.compute.add_instance(P, Z, "pet", "g2-standard-4")
    _listed(make_provider())
    assert fake.compute.calls["GET mig_aggregated"] == 0


def test_scale_in_deletes_the_member_through_its_group_down_to_the_autoscaler_minimum(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    mig = fake.compute.add_mig(P, "infer", zone=Z, size=3, autoscaler=(2, 6))
    provider = make_provider()
    listed = _listed(provider)
    first, second = (listed[n] for n in mig.members[:2])
    dry = provider.scale_in(first, dry_run=True)
    assert dry.outcome is ActionOutcome.DRY_RUN and mig.target_size == 3
    done = provider.scale_in(first, dry_run=False)
    assert done.outcome is ActionOutcome.DONE, done.detail
    assert "target size 3 -> 2 (minimum 2)" in done.detail
    assert mig.target_size == 2 and first.name not in mig.members
    held = provider.scale_in(second, dry_run=False)
    assert held.outcome is ActionOutcome.SKIPPED and AT_MINIMUM in held.detail
    assert mig.target_size == 2 and mig.recreated == 0  # nothing came back
    assert fake.compute.calls["POST stop"] == fake.compute.calls["DELETE delete"] == 0


def test_scale_in_of_a_regional_group(fake: FakeGcp,
                                      make_provider: Callable[..., GcpProvider]) -> None:
    mig = fake.compute.add_mig(P, "batch", zone=Z, size=2, regional=True)
    provider = make_provider()
    member = _listed(provider)[mig.members[0]]
    result = provider.scale_in(member, dry_run=False)
    assert result.outcome is ActionOutcome.DONE, result.detail
    assert mig.target_size == 1 and len(mig.members) == 1


def test_stop_and_terminate_refuse_a_member_even_from_a_stale_value(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    mig = fake.compute.add_mig(P, "infer", zone=Z, size=2)
    provider = make_provider()
    member = _listed(provider)[mig.members[0]]
    for inst in (member, member.model_copy(update={"owner": None})):
        stopped = provider.stop(inst, dry_run=False)
        assert stopped.outcome is ActionOutcome.SKIPPED
        assert "managed by mig infer" in stopped.detail
    assert fake.compute.calls["POST stop"] == 0
    assert mig.recreated == 0


def test_a_stopped_member_is_recreated_by_its_group(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider]) -> None:
    """Why costguard never stops a member: the group heals it under a new id."""
    mig = fake.compute.add_mig(P, "infer", zone=Z, size=2)
    first = mig.members[0]
    fake.compute.set_status(P, Z, first, "TERMINATED")
    names = set(_listed(make_provider()))
    assert first not in names and len(mig.members) == 2 and mig.recreated == 1


PARK = """\
policies:
  - name: park
    mode: enforce
    filters: {managed: true, state: running}
    condition:
      outside_hours: {timezone: UTC, hours: "08:00-19:00"}
    actions:
      - scale_to_zero
"""


def test_scale_to_zero_parks_a_mig_at_night_and_restores_it_but_leaves_autoscaled_ones(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider], tmp_path: Any) -> None:
    from datetime import UTC, datetime, timedelta

    from costguard.clock import ManualClock
    from costguard.config import Settings
    from costguard.engine import Engine
    from costguard.policy.load import parse_policy_text
    from costguard.store.db import Database

    plain = fake.compute.add_mig(P, "batch", zone=Z, size=3)
    scaled = fake.compute.add_mig(P, "infer", zone=Z, size=2, autoscaler=(1, 6))
    clock = ManualClock(datetime(2026, 11, 23, 20, 0, tzinfo=UTC))  # Monday night
    provider = GcpProvider(fake.settings(projects=[P]), clock=clock)

    def cycles(n: int) -> Engine:
        engine = Engine(Settings(), Database(f"sqlite:///{tmp_path / 'cg.db'}"),
                        {"gcp": provider}, parse_policy_text(PARK), clock,
                        alert_printer=lambda kind, subject, body: None)
        for _ in range(n):
            engine.run_cycle()
            clock.advance(timedelta(minutes=30))
        return engine

    cycles(3)
    assert plain.target_size == 0 and plain.members == []
    assert scaled.target_size == 2  # its autoscaler would undo a resize: left alone
    assert fake.compute.calls["POST mig_resize"] == 1  # parked once
    with Database(f"sqlite:///{tmp_path / 'cg.db'}").session() as s:
        from sqlmodel import select

        from costguard.store.tables import ActionJournalRow
        parks = [(r.instance_id, r.status) for r in s.exec(
            select(ActionJournalRow).where(ActionJournalRow.action == "park"))]
    # one refusal for the autoscaled group, journaled once for the night, not every cycle
    assert sorted(parks) == [("group:mig:us-central1-a:batch", "done"),
                             ("group:mig:us-central1-a:infer", "skipped")]
    clock.advance(timedelta(hours=11))  # Tuesday 08:30, a restarted daemon
    cycles(2)
    assert plain.target_size == 3 and len(plain.members) == 3
    assert fake.compute.calls["POST mig_resize"] == 2
    assert fake.compute.calls["POST stop"] == 0
    provider.close()
