"""Compute Engine disk snapshots through the real client against the Compute fake over HTTP
(the `Snapshot`, `Image` and `InstanceTemplate` fields of the API reference): what needs a
snapshot (an image, a global or regional instance template, a disk made from it, a snapshot
schedule, a Kubernetes VolumeSnapshot, costguard's own snapshot before a delete), the
delete and labels through global operations, dry runs; and, through the engine, an old
unneeded snapshot deleted after its warning and grace while the needed ones stay."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from sqlmodel import select

from costguard.clock import ManualClock
from costguard.demo.gcp_fake.disks import FakeDisk
from costguard.demo.gcp_fake.server import FakeGcp
from costguard.model import ActionOutcome
from costguard.providers.gcp import GcpProvider
from costguard.providers.gcp.snapshots import UNPRICED
from costguard.standing.model import Standing, StandingKind
from costguard.store.tables import ActionJournalRow
from tests.fakes.gcp_engine import gcp_engine_over

Make = Callable[..., GcpProvider]
P, Z = "ml-prod", "us-central1-a"
ONLY = frozenset({StandingKind.SNAPSHOT})


def _seed(fake: FakeGcp) -> None:
    c = fake.compute
    for name in ("lone", "imaged", "templated", "regional-tpl", "restored", "scheduled",
                 "costguards"):
        c.add_snapshot(P, name, size_gb=200, auto_created=name == "scheduled",
                       labels={"costguard_snapshot-of": "old-disk"}
                       if name == "costguards" else {"team": "vision"})
    c.add_snapshot(P, "k8s-snap", description=(  # the GKE PD CSI driver's, as it writes it
        '{"kubernetes.io/created-for/volumesnapshot/name":"nightly",'
        '"kubernetes.io/created-for/volumesnapshot/namespace":"prod",'
        '"kubernetes.io/created-for/volumesnapshotcontent/name":"snapcontent-1",'
        '"storage.gke.io/created-by":"pd.csi.storage.gke.io"}'))
    c.add_image(P, "base", "imaged")
    c.add_instance_template(P, "trainer", "templated")
    c.add_instance_template(P, "trainer-eu", "regional-tpl", region="europe-west4")
    c.add_disk(P, Z, "from-snap", size_gb=200, source_snapshot="restored")
    c.add_instance(P, Z, "vm", disks=[FakeDisk("vm", boot=True)])


def _listed(provider: GcpProvider) -> dict[str, Standing]:
    listed = provider.list_standing(ONLY)
    assert not listed.gaps, listed.gaps
    return {i.name or "": i for i in listed.items}


def test_what_needs_a_snapshot(fake: FakeGcp, make_provider: Make) -> None:
    _seed(fake)
    by_name = _listed(make_provider())
    assert set(by_name) == {"lone", "imaged", "templated", "regional-tpl", "restored",
                            "scheduled", "costguards", "k8s-snap"}
    held = {n: s.used_by for n, s in by_name.items() if s.in_use}
    assert held == {"imaged": ("image base",), "templated": ("instance template trainer",),
                    "regional-tpl": ("instance template trainer-eu",),
                    "restored": ("disk from-snap",), "scheduled": ("a snapshot schedule",),
                    "costguards": ("kept by costguard: taken before deleting old-disk",),
                    "k8s-snap": ("Kubernetes VolumeSnapshot prod/nightly",)}
    lone = by_name["lone"]
    assert (lone.in_use, lone.size_gb, lone.detail, lone.region) == (False, 200, "old-disk",
                                                                     "global")
    assert lone.usd_per_month is None and lone.price_source == UNPRICED
    assert lone.resource_id.isdigit() and lone.tags == {"team": "vision"}


def test_delete_and_labels_through_global_operations(fake: FakeGcp, make_provider: Make
                                                     ) -> None:
    fake.compute.add_snapshot(P, "lone", labels={"team": "vision"})
    provider = make_provider()
    (item,) = _listed(provider).values()
    dry = provider.tag_standing(item, {"costguard:unused-since": "x"}, dry_run=True)
    assert dry.outcome is ActionOutcome.DRY_RUN
    done = provider.tag_standing(item, {"costguard:unused-since": "x"}, dry_run=False)
    assert done.outcome is ActionOutcome.DONE, done.detail
    assert fake.compute.snapshots[(P, "lone")]["labels"] == {"team": "vision",
                                                             "costguard_unused-since": "x"}
    assert provider.delete_standing(item, dry_run=True).outcome is ActionOutcome.DRY_RUN
    deleted = provider.delete_standing(item, dry_run=False)
    assert deleted.outcome is ActionOutcome.DONE, deleted.detail
    assert (P, "lone") not in fake.compute.snapshots
    assert provider.describe_standing(item) is None
    assert provider.delete_standing(item, dry_run=False).outcome is ActionOutcome.SKIPPED


POLICY = """\
policies:
  - name: unused-snapshots
    resource: snapshot
    mode: enforce
    condition: {unused: {for: 2h}}
    actions: [notify, {delete: {grace: 1h}}]
"""


def test_the_engine_deletes_the_unneeded_one_only(fake: FakeGcp, clock: ManualClock,
                                                  tmp_path: Path) -> None:
    _seed(fake)
    with gcp_engine_over(fake, tmp_path, POLICY, clock) as engine:
        for _ in range(6):
            engine.run_cycle()
            clock.advance(timedelta(hours=1))
        left = {name for (_, name) in fake.compute.snapshots}
        assert left == {"imaged", "templated", "regional-tpl", "restored", "scheduled",
                        "costguards", "k8s-snap"}
        with engine.db.session() as s:
            done = [j.detail for j in s.exec(select(ActionJournalRow).where(
                ActionJournalRow.action == "delete", ActionJournalRow.status == "done"))]
        assert len(done) == 1  # lone
