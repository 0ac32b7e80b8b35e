"""Through the engine: the batched act stage on GCP. Idle GPU VMs are stopped after a
re-check, their stop alerts price the disks read in bulk (no instances.get or disks.get per
VM), untagged VMs are labelled with the re-check's fingerprints, and a VM recreated under
its name between inventory and the re-check is skipped and journaled, not stopped."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlmodel import select

from costguard.alerts.settings import AlertsSettings
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.demo.gcp_fake.disks import FakeDisk
from costguard.demo.gcp_fake.server import FakeGcp
from costguard.engine import Engine
from costguard.policy.load import load_policy_set
from costguard.providers.gcp import GcpProvider
from costguard.providers.gcp.metrics import SM_V2, UTIL
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow, AlertRow

POLICY = """\
policies:
  - name: idle-gpu-stop
    filters: {gpu: true, state: running}
    condition:
      idle: {signal: auto, below: 5, for: 1h, min_coverage: 0.8, missing_data: not-idle}
    actions: [{stop: {grace: 0m}}]
    mode: enforce
  - name: missing-team-label
    condition: {missing_tags: [team]}
    actions: [{tag: {set: {"costguard:untagged-since": "{now}"}}}]
    mode: enforce
"""
IDLE = ["idle-a", "idle-b", "idle-c"]  # idle-c alone in its zone


def _idle_vms(fake: FakeGcp, clock: ManualClock, zones: dict[str, str],
              project: str = "ml-prod") -> None:
    now = clock.now()
    for name, zone in zones.items():
        vm = fake.compute.add_instance(
            project, zone, name, "a2-highgpu-1g", labels={"team": "nlp"},
            disks=[FakeDisk(name, size_gb=200, boot=True),
                   FakeDisk(f"{name}-data", size_gb=1000, disk_type="pd-ssd")])
        points = [(now - timedelta(minutes=75 - m, seconds=-30), 0.5) for m in range(75)]
        for metric in (UTIL, SM_V2):
            fake.monitoring.add_gpu_series(project, metric, str(vm.id),
                                           [(t, v / 100 if metric == SM_V2 else v)
                                            for t, v in points], zone=zone)


def _engine(fake: FakeGcp, clock: ManualClock, tmp_path: Path, projects: tuple[str, ...] = (
            "ml-prod",), **gcp: object) -> Generator[tuple[Engine, Database], None, None]:
    (tmp_path / "p.yml").write_text(POLICY)
    url = f"sqlite:///{tmp_path / 'cg.db'}"
    settings = Settings(database_url=url, policy_paths=[tmp_path / "p.yml"],
                        alerts=AlertsSettings(console=False))
    db = Database(url)
    provider = GcpProvider(fake.settings(projects=list(projects), **gcp), clock=clock)
    yield Engine(settings, db, {"gcp": provider}, load_policy_set([tmp_path / "p.yml"]),
                 clock), db
    provider.close()
    db.dispose()


@pytest.fixture
def engine(fake: FakeGcp, clock: ManualClock, tmp_path: Path
           ) -> Iterator[tuple[Engine, Database]]:
    _idle_vms(fake, clock, {n: "us-central1-b" if n == "idle-c" else "us-central1-a"
                            for n in IDLE})
    fake.compute.add_instance("ml-prod", "us-central1-a", "cpu-1", "n2-standard-8")
    fake.compute.add_instance("ml-prod", "us-central1-b", "cpu-2", "n2-standard-8")
    yield from _engine(fake, clock, tmp_path)


def test_a_cycle_stops_prices_in_bulk_and_labels_without_per_vm_reads(
    fake: FakeGcp, engine: tuple[Engine, Database]
) -> None:
    cycle, db = engine
    summary = cycle.run_cycle()

    assert summary.actions["stopped"] == {"idle-gpu-stop": 3}
    assert summary.actions["tagged"] == {"missing-team-label": 2}
    assert {n for n in IDLE if fake.compute.instance(
        "ml-prod", "us-central1-b" if n == "idle-c" else "us-central1-a", n
    ).status == "TERMINATED"} == set(IDLE)
    assert "costguard_untagged-since" in fake.compute.instance(
        "ml-prod", "us-central1-b", "cpu-2").labels
    with db.session() as s:
        bodies = [a.body or "" for a in s.exec(select(AlertRow).where(AlertRow.kind == "action"))]
    # 200 GiB pd-balanced + 1000 GiB pd-ssd = $190 a month
    assert len(bodies) == 3
    assert all("While stopped it still costs $0.2603/h (persistent disks" in b for b in bodies)
    calls = fake.compute.calls
    assert calls["GET get"] == 0 and calls["GET disk_get"] == 0
    assert calls["GET disk_aggregated_list"] == 1
    # inventory, then per phase one filtered listing: stop re-check, read-back, tag re-check
    assert calls["GET aggregated_list"] == 4
    assert calls["POST stop"] == 3 and calls["POST set_labels"] == 2


def test_a_projects_regions_are_one_scope_read_and_sent_once(
    fake: FakeGcp, clock: ManualClock, tmp_path: Path
) -> None:
    """A project's VMs in three regions: the act stage's scope is the project (a filtered
    aggregatedList reads every zone, a batch holds calls to any zone), so each phase reads
    or sends once for the project, not once per region."""
    zones = {"idle-us": "us-central1-a", "idle-eu": "europe-west4-a",
             "idle-asia": "asia-southeast1-b", "idle-us2": "us-east1-c"}
    _idle_vms(fake, clock, zones)
    for n, zone in enumerate(zones.values()):
        fake.compute.add_instance("ml-prod", zone, f"cpu-{n}", "n2-standard-8")
    built = _engine(fake, clock, tmp_path)
    cycle, _ = next(built)
    summary = cycle.run_cycle()
    built.close()

    assert summary.actions["stopped"] == {"idle-gpu-stop": 4}
    assert summary.actions["tagged"] == {"missing-team-label": 4}
    calls = fake.compute.calls
    assert calls["GET get"] == 0
    assert calls["GET disk_aggregated_list"] == 1  # was one per region
    assert calls["GET aggregated_list"] == 4  # as in one region
    assert calls["POST batch"] == len(fake.compute.batch_sizes) == 2  # the stops, the labels
    assert fake.compute.batch_sizes == [4, 4]


@pytest.mark.parametrize("join_ms", [0, 1000])
def test_projects_acted_on_together_share_their_batch_requests(
    fake: FakeGcp, clock: ManualClock, tmp_path: Path, join_ms: int
) -> None:
    """Four projects, acted on concurrently: their stops go in one HTTP batch request and
    their relabels in another, each VM's call answered to its own project; without the
    join (0 ms) each project sends its own two."""
    projects = ("ml-team-a", "ml-team-b", "ml-team-c", "ml-team-d")
    for p in projects:
        _idle_vms(fake, clock, {f"{p}-idle-1": "us-central1-a",
                                f"{p}-idle-2": "europe-west4-a"}, project=p)
        fake.compute.add_instance(p, "us-central1-a", f"{p}-cpu", "n2-standard-8")
    built = _engine(fake, clock, tmp_path, projects, max_workers=4,
                    http_batch_join_ms=join_ms)
    cycle, _ = next(built)
    summary = cycle.run_cycle()
    built.close()

    assert summary.actions["stopped"] == {"idle-gpu-stop": 8}
    assert summary.actions["tagged"] == {"missing-team-label": 4}
    for p in projects:
        for n, zone in ((1, "us-central1-a"), (2, "europe-west4-a")):
            assert fake.compute.instance(p, zone, f"{p}-idle-{n}").status == "TERMINATED"
        assert "costguard_untagged-since" in fake.compute.instance(
            p, "us-central1-a", f"{p}-cpu").labels
    assert fake.compute.calls["POST stop"] == 8 and fake.compute.calls["POST set_labels"] == 4
    if join_ms:  # the four projects' threads reach each phase well within a second
        assert fake.compute.batch_sizes == [8, 4]
    else:
        assert sorted(fake.compute.batch_sizes) == [1] * 4 + [2] * 4


def test_a_vm_recreated_after_inventory_is_skipped_and_journaled(
    fake: FakeGcp, engine: tuple[Engine, Database]
) -> None:
    cycle, db = engine
    lists: list[str] = []

    def recreate_at_the_recheck(method: str, path: str) -> None:
        if path.endswith("/aggregated/instances"):
            lists.append(path)
            if len(lists) == 2:  # the first listing is the inventory; this is the re-check
                fake.compute.remove_instance("ml-prod", "us-central1-a", "idle-b")
                fake.compute.add_instance("ml-prod", "us-central1-a", "idle-b",
                                          "a2-highgpu-1g", labels={"team": "nlp"})

    fake.compute.on_request = recreate_at_the_recheck
    summary = cycle.run_cycle()

    assert summary.actions["stopped"] == {"idle-gpu-stop": 2}
    assert fake.compute.instance("ml-prod", "us-central1-a", "idle-b").status == "RUNNING"
    with db.session() as s:
        rows = {r.instance_id: r for r in s.exec(select(ActionJournalRow).where(
            ActionJournalRow.action == "stop", ActionJournalRow.status != "intent"))}
    statuses = sorted(r.status for r in rows.values())
    assert statuses == ["done", "done", "skipped"]
    skipped = next(r for r in rows.values() if r.status == "skipped")
    assert "re-check before stop" in skipped.detail
