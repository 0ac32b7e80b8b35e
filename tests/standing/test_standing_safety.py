"""The safety of deleting what bills while nothing runs (hypothesis): over random histories
(attach and detach, protect and unprotect, snooze, recreate under the same id, snapshots
that take a while or fail), no delete ever reaches a protected, attached, in-use or
recently used resource, and no volume is deleted before its snapshot has completed.

The provider here is an in-memory cloud that keeps the truth and records every call; the
stage runs as the engine runs it (`standing.stage.govern`) on a real SQLite store."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlmodel import select

from costguard.costs.attribution import Attributor
from costguard.model import ActionOutcome, ActionResult
from costguard.policy.load import parse_policy_text
from costguard.policy.schema import Policy
from costguard.standing.act import StandingRunner
from costguard.standing.model import Standing, StandingKind, StandingList
from costguard.standing.stage import govern
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow, AlertRow, PolicyStateRow

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
STEP = timedelta(hours=6)
UNUSED_FOR = timedelta(days=1)
GRACE = timedelta(hours=12)
POLICIES = parse_policy_text(f"""\
policies:
  - name: volumes
    resource: volume
    mode: enforce
    condition: {{unused: {{for: {UNUSED_FOR.days}d}}}}
    actions: [notify, {{delete: {{grace: {GRACE.seconds // 3600}h}}}}]
    limits: {{max_actions_per_cycle: 50}}
  - name: snapshots
    resource: snapshot
    mode: enforce
    condition: {{unused: {{for: {UNUSED_FOR.days}d}}}}
    actions: [notify, {{delete: {{grace: {GRACE.seconds // 3600}h}}}}]
    limits: {{max_actions_per_cycle: 50}}
  - name: addresses
    resource: address
    mode: enforce
    condition: {{unused: {{for: {UNUSED_FOR.days}d}}}}
    actions: [{{delete: {{grace: {GRACE.seconds // 3600}h}}}}]
    limits: {{max_actions_per_cycle: 50}}
""", "p.yml").policies


@dataclass
class Truth:
    kind: StandingKind
    created: datetime
    attached: bool = False
    held: str | None = None  # what else holds it, unattached (a Kubernetes volume)
    protect: str | None = None
    snooze: datetime | None = None
    used_at: datetime = T0  # the last moment something used it


@dataclass
class Cloud:
    """The truth, and every delete with what the truth was at that moment."""

    now: datetime = T0
    items: dict[str, Truth] = field(default_factory=dict)
    snaps: dict[str, tuple[str, int]] = field(default_factory=dict)  # vol -> (state, ready)
    fail_snaps: set[str] = field(default_factory=set)
    deletes: list[tuple[str, Truth, str | None]] = field(default_factory=list)
    shown: list[list[Standing]] = field(default_factory=list)

    def view(self, rid: str) -> Standing:
        t = replace(self.items[rid])
        tags = {k: v for k, v in (("team", "ml"), ("costguard:protect", t.protect),
                                  ("costguard:snooze-until",
                                   t.snooze.isoformat() if t.snooze else None)) if v}
        return Standing(kind=t.kind, provider="sim", account="a", region="r", resource_id=rid,
                        state="in-use" if t.attached else "available", in_use=t.attached,
                        used_by=(("i-1",) if t.attached else ()) + ((t.held,) if t.held else ()),
                        created_at=t.created,
                        # the cloud dates the last detach, as a persistent disk's
                        # lastDetachTimestamp does, once there was one (EC2 does not: a
                        # use no listing or re-check saw is not seen there)
                        unused_since=t.used_at if not t.attached and t.used_at > T0
                        else None,
                        usd_per_month=10.0, tags=tags, observed_at=self.now)

    # HoldsStanding
    def standing_kinds(self) -> frozenset[StandingKind]:
        return frozenset(StandingKind)

    def list_standing(self, kinds: frozenset[StandingKind]) -> StandingList:
        """A listing lags: it shows the cloud as it was three steps before, longer than the
        grace (what changed since is seen only by the re-check before a delete)."""
        self.shown.append([self.view(r) for r in self.items])
        shown = self.shown.pop(0) if len(self.shown) > 3 else []
        return StandingList(items=[i for i in shown if i.kind in kinds])

    def describe_standing(self, item: Standing) -> Standing | None:
        return self.view(item.resource_id) if item.resource_id in self.items else None

    def snapshot_volume(self, item: Standing, *, dry_run: bool) -> tuple[str, str]:
        if dry_run:
            return "", "dry-run"
        state, ready = self.snaps.setdefault(item.resource_id, ("pending", 2))
        if state == "pending":
            ready -= 1
            state = ("error" if item.resource_id in self.fail_snaps else
                     "completed" if ready <= 0 else "pending")
            self.snaps[item.resource_id] = (state, ready)
        return f"snap-of-{item.resource_id}", state

    def delete_standing(self, item: Standing, *, dry_run: bool) -> ActionResult:
        if dry_run:
            return ActionResult(outcome=ActionOutcome.DRY_RUN, detail="would be deleted")
        truth = self.items.pop(item.resource_id)
        snap = self.snaps.get(item.resource_id, ("none", 0))[0]
        self.deletes.append((item.resource_id, truth, snap))
        return ActionResult(outcome=ActionOutcome.DONE, detail="deleted")

    def tag_standing(self, item: Standing, tags: dict[str, str], *, dry_run: bool
                     ) -> ActionResult:
        return ActionResult(outcome=ActionOutcome.DONE)


EVENTS = st.sampled_from(["attach", "detach", "protect", "unprotect", "protect-false",
                          "snooze", "recreate", "nothing", "nothing", "nothing"])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                               HealthCheck.function_scoped_fixture])
@given(kinds=st.lists(st.sampled_from(list(StandingKind)), min_size=1, max_size=5),
       history=st.lists(st.lists(st.tuples(st.integers(0, 4), EVENTS), max_size=3),
                        min_size=4, max_size=14),
       failing=st.sets(st.integers(0, 4), max_size=2))
def test_no_delete_reaches_what_is_protected_attached_used_or_unsnapshotted(
        tmp_path_factory: object, kinds: list[StandingKind],
        history: list[list[tuple[int, str]]], failing: set[int]) -> None:
    path = Path(tmp_path_factory.mktemp("standing")) / "s.db"  # type: ignore[attr-defined]
    db = Database(f"sqlite:///{path}")
    cloud = Cloud()
    for i, kind in enumerate(kinds):
        cloud.items[f"r-{i}"] = Truth(kind, T0 - timedelta(days=30))
    cloud.fail_snaps = {f"r-{i}" for i in failing}
    runner = StandingRunner(db, {"sim": cloud}, Attributor())
    for step, events in enumerate(history):
        cloud.now = T0 + step * STEP
        for index, event in events:
            rid = f"r-{index}"
            t = cloud.items.get(rid)
            if t is None:
                continue
            if event == "attach" and t.kind is not StandingKind.SNAPSHOT:
                t.attached, t.used_at = True, cloud.now
            elif event == "detach" and t.attached:
                t.attached, t.used_at = False, cloud.now
            elif event in ("protect", "unprotect", "protect-false"):
                t.protect = {"protect": "yes", "unprotect": None, "protect-false": "false"}[event]
            elif event == "snooze":
                t.snooze = cloud.now + timedelta(hours=18)
            elif event == "recreate":
                cloud.items[rid] = Truth(t.kind, cloud.now, used_at=cloud.now)
        # every cycle lists (the hour between listings has passed each step)
        govern(db, {"sim": cloud}, POLICIES, runner, Attributor(), cloud.now, step)
        for rid, truth, snap in cloud.deletes:
            assert not truth.attached, rid
            assert truth.protect in (None, "false"), rid
            assert truth.snooze is None or truth.snooze <= cloud.now, rid
            # unused, as the truth has it, for the policy's window and its grace
            assert cloud.now - max(truth.used_at, truth.created) >= UNUSED_FOR + GRACE, rid
            if truth.kind is StandingKind.VOLUME:
                assert snap == "completed", (rid, snap)
    db.dispose()


def test_a_quiet_history_does_delete(tmp_path: Path) -> None:
    """The property above is not vacuous: left alone, each kind is deleted in time."""
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    cloud = Cloud()
    for i, kind in enumerate(StandingKind):
        cloud.items[f"r-{i}"] = Truth(kind, T0 - timedelta(days=30))
    runner = StandingRunner(db, {"sim": cloud}, Attributor())
    for step in range(16):
        cloud.now = T0 + step * STEP
        govern(db, {"sim": cloud}, POLICIES, runner, Attributor(), cloud.now, step)
    assert sorted(r for r, _, _ in cloud.deletes) == ["r-0", "r-1", "r-2"]
    assert dict((r, s) for r, _, s in cloud.deletes)["r-0"] == "completed"
    db.dispose()


@pytest.mark.parametrize(("event", "says"), [
    ("attach", "in use again"),
    ("protect", "costguard:protect was set"),
    ("snooze", "snoozed until"),
    ("recreate", "recreated under its id"),
    ("attach-detach", "used since the last listing (detached again at"),
])
def test_what_changed_after_the_listing_is_seen_by_the_recheck(
        tmp_path: Path, event: str, says: str) -> None:
    """The listing still shows the address unused, unprotected and the same one when its
    grace ends: only the re-check before the delete can see the change, and it does (a use
    that began and ended between two looks, by the detach time the cloud gives)."""
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    cloud = Cloud()
    cloud.items["r-0"] = Truth(StandingKind.ADDRESS, T0 - timedelta(days=30))
    runner = StandingRunner(db, {"sim": cloud}, Attributor())
    outs = []
    for step in range(10):
        cloud.now = T0 + step * STEP
        if step == 8:  # after the warning (step 7), before the deadline (step 9)
            t = cloud.items["r-0"]
            if event == "attach":
                t.attached = True
            elif event == "attach-detach":  # used and let go again, between two looks
                t.used_at = cloud.now + timedelta(hours=1)
            elif event == "protect":
                t.protect = "yes"
            elif event == "snooze":
                t.snooze = cloud.now + timedelta(days=1)
            else:
                cloud.items["r-0"] = Truth(StandingKind.ADDRESS, cloud.now)
        outs.append(govern(db, {"sim": cloud}, POLICIES, runner, Attributor(), cloud.now,
                           step))
    assert outs[7]["actions"] == {"warned": {"addresses": 1}}
    assert outs[9]["actions"] == {"skipped": {"addresses": 1}} and not cloud.deletes
    with db.session() as s:
        (row,) = s.exec(select(ActionJournalRow).where(ActionJournalRow.action == "delete"))
    assert (row.status, says in row.detail) == ("skipped", True), row.detail
    db.dispose()


def test_a_volume_of_a_stopped_instance_is_unused_since_the_stop(tmp_path: Path) -> None:
    """A volume (or address) held only by instances inventory shows stopped is unused since
    the latest of those stops; one holder running, or unknown, keeps it in use."""
    from costguard.standing.stage import held_by_stopped
    from costguard.store.tables import InstanceRow

    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    stopped_at = T0 - timedelta(days=20)
    with db.session() as s:
        for iid, state, at in (("i-1", "stopped", stopped_at),
                               ("i-2", "stopped", stopped_at + timedelta(days=2)),
                               ("i-3", "running", T0)):
            s.add(InstanceRow(provider="sim", instance_id=iid, account="a", region="r",
                              instance_type="g5.xlarge", state=state, lifecycle="on-demand",
                              launch_time=T0 - timedelta(days=60), first_seen=T0, last_seen=T0,
                              state_changed_at=at))
    volume = Standing(kind=StandingKind.VOLUME, provider="sim", account="a", region="r",
                      resource_id="vol-1", state="in-use", in_use=True, created_at=T0,
                      observed_at=T0)
    with db.session() as s:
        for holders, unused_since in ((("i-1",), stopped_at),
                                      (("i-1", "i-2"), stopped_at + timedelta(days=2)),
                                      (("i-1", "i-3"), None), (("i-9",), None)):
            got = held_by_stopped(s, volume.model_copy(update={"used_by": holders}))
            assert (got.in_use, got.unused_since) == (unused_since is None, unused_since)
    db.dispose()


def _stage(tmp_path: Path, policies: tuple[Policy, ...], cloud: Cloud, steps: range,
           events: dict[int, Callable[[Cloud], None]]) -> tuple[Database, list[dict[str, Any]]]:
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    runner = StandingRunner(db, {"sim": cloud}, Attributor())
    outs = []
    for step in steps:
        cloud.now = T0 + step * STEP
        if step in events:
            events[step](cloud)
        outs.append(govern(db, {"sim": cloud}, policies, runner, Attributor(), cloud.now,
                           step))
    return db, outs


def test_a_failed_snapshot_ends_the_episode_once(tmp_path: Path) -> None:
    cloud = Cloud()
    cloud.items["r-0"] = Truth(StandingKind.VOLUME, T0 - timedelta(days=30))
    cloud.fail_snaps = {"r-0"}
    db, outs = _stage(tmp_path, POLICIES, cloud, range(16), {})
    assert not cloud.deletes and "r-0" in cloud.items
    with db.session() as s:
        alerts = list(s.exec(select(AlertRow).where(AlertRow.kind == "action-failed")))
        snaps = list(s.exec(select(ActionJournalRow).where(
            ActionJournalRow.action == "snapshot")))
        (state,) = list(s.exec(select(PolicyStateRow)))
    assert len(alerts) == 1 and "its snapshot failed" in alerts[0].subject
    assert alerts[0].team == "ml" and alerts[0].recipients == ["unowned", "team:ml"]
    assert [(j.status, j.detail) for j in snaps] == [
        ("failed", "snapshot snap-of-r-0 error")]  # tried once, not every cycle
    assert state.state == "failed"
    assert sum(1 for o in outs if o.get("actions", {}).get("warned")) == 1
    db.dispose()


def test_a_dry_run_warns_again_after_the_resource_was_used(tmp_path: Path) -> None:
    dry = tuple(p.model_copy(update={"mode": "dry-run"}) for p in POLICIES)
    cloud = Cloud()
    cloud.items["r-0"] = Truth(StandingKind.ADDRESS, T0 - timedelta(days=30))

    def attach(c: Cloud) -> None:
        c.items["r-0"].attached = True

    def detach(c: Cloud) -> None:
        c.items["r-0"].attached = False

    db, outs = _stage(tmp_path, dry, cloud, range(30), {10: attach, 14: detach})
    warned = [i for i, o in enumerate(outs) if o.get("actions", {}).get("warned")]
    dry_runs = [i for i, o in enumerate(outs) if o.get("actions", {}).get("dry_run")]
    assert len(warned) == 2 and len(dry_runs) == 2 and not cloud.deletes
    db.dispose()


def test_a_snoozed_resource_is_neither_warned_of_nor_deleted(tmp_path: Path) -> None:
    cloud = Cloud()
    cloud.items["r-0"] = Truth(StandingKind.ADDRESS, T0 - timedelta(days=30),
                               snooze=T0 + timedelta(days=3))
    db, outs = _stage(tmp_path, POLICIES, cloud, range(20), {})
    warned = [i for i, o in enumerate(outs) if o.get("actions", {}).get("warned")]
    assert warned and T0 + warned[0] * STEP >= T0 + timedelta(days=3)
    assert [r for r, _, _ in cloud.deletes] == ["r-0"]  # once the snooze is over
    db.dispose()


def test_a_policy_that_deletes_never_warns_of_what_something_holds(tmp_path: Path) -> None:
    """A volume a Kubernetes PersistentVolume holds (a StatefulSet scaled to zero detached
    it) is unused and billed, and reported, but a delete policy neither warns of it nor
    deletes it; the same policy deletes its unheld twin."""
    cloud = Cloud()
    cloud.items["r-0"] = Truth(StandingKind.VOLUME, T0 - timedelta(days=30),
                               held="Kubernetes PersistentVolume pv-1 (claim ml/data-0)")
    cloud.items["r-1"] = Truth(StandingKind.VOLUME, T0 - timedelta(days=30))
    db, _ = _stage(tmp_path, POLICIES, cloud, range(16), {})
    assert [r for r, _, _ in cloud.deletes] == ["r-1"]
    with db.session() as s:
        notes = list(s.exec(select(ActionJournalRow).where(
            ActionJournalRow.action == "notify")))
    assert {j.instance_id for j in notes} == {"r-1"}
    db.dispose()
