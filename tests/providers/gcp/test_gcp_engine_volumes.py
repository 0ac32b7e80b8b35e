"""Through the engine: the shipped storage policy, enforced, on Compute Engine disks. A disk
detached 40 days ago (its lastDetachTimestamp) is warned of, snapshotted and, a day later,
deleted with its snapshot named; a disk of a VM stopped a long time is reported, never
deleted (attached); a protected one and a Kubernetes PersistentVolume's (detached when its
StatefulSet scaled to zero) are never warned of; a boot disk in use is left alone."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from sqlmodel import select

from costguard.clock import ManualClock
from costguard.demo.gcp_fake.disks import FakeDisk
from costguard.demo.gcp_fake.server import FakeGcp
from costguard.store.tables import ActionJournalRow, AlertRow, StandingRow
from tests.fakes.gcp_engine import gcp_engine_over

ROOT = Path(__file__).resolve().parents[3]
P, Z = "ml-prod", "us-central1-a"


def test_an_old_detached_disk_is_snapshotted_then_deleted(
        fake: FakeGcp, clock: ManualClock, tmp_path: Path) -> None:
    c = fake.compute
    now = clock.now()
    c.add_instance(P, Z, "busy")
    c.add_instance(P, Z, "parked", status="TERMINATED", last_start=now - timedelta(days=60),
                   disks=[FakeDisk("parked", boot=True), FakeDisk("parked-data", size_gb=800)])
    c.add_disk(P, Z, "old-scratch", size_gb=500, labels={"team": "research"},
               last_detach=now - timedelta(days=40))
    c.add_disk(P, Z, "kept", size_gb=500, labels={"costguard_protect": "true"},
               last_detach=now - timedelta(days=40))
    # a StatefulSet scaled to zero: its PersistentVolume's disk, detached (the GKE PD CSI
    # driver's description, as the driver writes it)
    c.add_disk(P, Z, "pvc-2ee556dd", size_gb=100, last_detach=now - timedelta(days=40),
               labels={"goog-gke-volume": ""}, description=(
                   '{"kubernetes.io/created-for/pv/name":"pvc-2ee556dd",'
                   '"kubernetes.io/created-for/pvc/name":"data-db-0",'
                   '"kubernetes.io/created-for/pvc/namespace":"prod",'
                   '"storage.gke.io/created-by":"pd.csi.storage.gke.io"}'))
    text = (ROOT / "policies" / "storage.yml").read_text().replace("mode: dry-run",
                                                                  "mode: enforce")
    with gcp_engine_over(fake, tmp_path, text, clock) as engine:
        for _ in range(27):
            engine.run_cycle()
            clock.advance(timedelta(hours=1))
        left = {d.name for _, _, d in c.detached_disks}
        assert left == {"kept", "pvc-2ee556dd"}  # old-scratch deleted; protected, held kept
        assert {name for (_, name) in c.snapshots} and all(
            s["labels"] == {"costguard_snapshot-of": "old-scratch"}
            for s in c.snapshots.values())
        with engine.db.session() as s:
            deletes = list(s.exec(select(ActionJournalRow).where(
                ActionJournalRow.action == "delete")))
            alerts = {(a.kind, a.instance_id) for a in s.exec(select(AlertRow))}
            rows = {r.name: r for r in s.exec(select(StandingRow))}  # by name
        ids = {name: r.resource_id for name, r in rows.items()}
        assert [(j.instance_id, j.status) for j in deletes] == [(ids["old-scratch"], "done")]
        assert ("delete-warning", ids["old-scratch"]) in alerts
        assert ("deleted", ids["old-scratch"]) in alerts
        assert not {a for a in alerts if a[1] == ids["kept"]}
        parked = rows["parked-data"]
        assert not parked.in_use and parked.used_by == ["parked"]  # the stopped VM's disk
        assert ("delete-warning", ids["parked-data"]) not in alerts
        assert rows["busy"].in_use
        assert rows["old-scratch"].gone
        assert rows["pvc-2ee556dd"].used_by == [
            "Kubernetes PersistentVolume pvc-2ee556dd (claim prod/data-db-0)"]
        assert not {a for a in alerts if a[1] == ids["pvc-2ee556dd"]}  # never warned of
