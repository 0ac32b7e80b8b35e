"""Managed fleets, over generated fleets and policies (hypothesis): no stop, start or
terminate call ever names a controller's member, and no scale-in takes a group below its
minimum. Each example runs the real Engine for 90 minutes of 10-minute cycles."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costguard.actions.settings import SafetySettings
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.engine import Engine
from costguard.model import Owner, OwnerKind
from costguard.policy.load import parse_policy_text
from costguard.store.db import Database
from tests.fakes.cloud import BUSY, IDLE, T0, ScriptedCloud, full_cloud
from tests.fakes.scenario import journal, run_for

PROPS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])

GROUPS = {
    "asg-a": OwnerKind.ASG, "asg-b": OwnerKind.ASG, "mig-a": OwnerKind.MIG,
    "pool": OwnerKind.GKE, "emr": OwnerKind.EMR, "other": OwnerKind.UNKNOWN,
}


@dataclass(frozen=True)
class Box:
    group: str | None  # None: a pet
    busy: bool


boxes = st.builds(Box, group=st.sampled_from([None, None, *GROUPS]),
                  busy=st.sampled_from([False, False, True]))

STEPS = {
    "stop": "      - stop: {grace: 10m}\n",
    "scale_in": "      - scale_in: {grace: 10m}\n",
    "terminate": "      - terminate: {after_stopped: 1h, snapshot: false, warn_before: 10m}\n",
}
steps = st.sampled_from([("stop",), ("scale_in",), ("stop", "scale_in"), ("stop", "terminate"),
                         ("stop", "terminate", "scale_in")])
managed_filter = st.sampled_from(["", "managed: true, ", "managed: false, ",
                                  "owner_kind: [asg, gke], "])


def _cloud(fleet: list[Box], minimums: dict[str, int]) -> ScriptedCloud:
    cloud = full_cloud(ManualClock(T0))
    members = {g: sum(1 for b in fleet if b.group == g) for g in GROUPS}
    for name in GROUPS:
        cloud.add_group(name, desired=members[name], min_size=min(minimums[name],
                                                                  members[name]))
    for i, box in enumerate(fleet):
        owner = (Owner(kind=GROUPS[box.group], name=box.group, via="test")
                 if box.group else None)
        cloud.add(f"i-{i}", BUSY if box.busy else IDLE, owner=owner)
    return cloud


@PROPS
@given(fleet=st.lists(boxes, min_size=1, max_size=8), kinds=steps, filt=managed_filter,
       recheck=st.booleans(),
       minimums=st.fixed_dictionaries({g: st.integers(0, 3) for g in GROUPS}))
def test_no_pet_action_names_a_member_and_no_group_goes_below_its_minimum(
        fleet: list[Box], kinds: tuple[str, ...], filt: str, recheck: bool,
        minimums: dict[str, int]) -> None:
    cloud = _cloud(fleet, minimums)
    floor = {name: low for name, (_, low) in cloud.groups.items()}
    text = ("policies:\n  - name: idle\n    mode: enforce\n"
            f"    filters: {{{filt}gpu: true, state: running}}\n"
            "    condition:\n      idle: {below: 5, for: 30m}\n    actions:\n"
            "      - notify: {to: owner}\n" + "".join(STEPS[k] for k in kinds)
            + "    limits: {max_actions_per_cycle: 10}\n")
    engine = Engine(Settings(), Database("sqlite://"), {"sim": cloud},
                    parse_policy_text(text), cloud.clock,
                    alert_printer=lambda kind, subject, body: None)
    engine.runner.safety = SafetySettings(recheck_before_acting=recheck)
    run_for(engine, cloud.clock, timedelta(hours=1, minutes=30), step=timedelta(minutes=10))

    for verb, iid in cloud.acted_on:
        box = fleet[int(iid.removeprefix("i-"))]
        if verb in ("stop", "start", "terminate"):
            assert box.group is None, f"{verb} on a member of {box.group}"
        if verb == "scale_in":
            assert box.group is not None and GROUPS[box.group].scalable, box
            assert "scale_in" in kinds
    for name, (desired, _) in cloud.groups.items():
        assert desired >= floor[name], f"{name} went below its minimum"
    scaled = [iid for verb, iid in cloud.acted_on if verb == "scale_in"]
    assert all(not fleet[int(i.removeprefix("i-"))].busy for i in scaled)
    # every refusal says who owns the instance
    for j in journal(engine.db):
        box = fleet[int(j.instance_id.removeprefix("i-"))]
        if j.action == "skip" and "|managed|" in j.key:
            assert box.group is not None and box.group in j.detail


def test_idle_group_shrinks_to_its_minimum_and_a_node_pool_is_only_reported() -> None:
    fleet = [Box("asg-a", False)] * 4 + [Box("pool", False)] * 2 + [Box(None, False)]
    cloud = _cloud(fleet, {**dict.fromkeys(GROUPS, 0), "asg-a": 1})
    text = ("policies:\n  - name: idle\n    mode: enforce\n"
            "    filters: {gpu: true, state: running}\n"
            "    condition:\n      idle: {below: 5, for: 30m}\n    actions:\n"
            "      - notify: {to: owner}\n" + STEPS["stop"] + STEPS["scale_in"])
    engine = Engine(Settings(), Database("sqlite://"), {"sim": cloud},
                    parse_policy_text(text), cloud.clock,
                    alert_printer=lambda kind, subject, body: None)
    run_for(engine, cloud.clock, timedelta(hours=2), step=timedelta(minutes=10))

    assert cloud.groups["asg-a"][0] == 1  # 4 -> 1: its minimum
    assert sorted(v for v, _ in cloud.acted_on) == ["scale_in"] * 3 + ["stop"]
    assert cloud.acted_on.count(("stop", "i-6")) == 1  # the pet is stopped as ever
    rows = journal(engine.db)
    at_min = [j for j in rows if j.action == "scale_in" and j.status == "skipped"]
    assert len(at_min) == 1 and "minimum" in at_min[0].detail
    pool = [j for j in rows if j.instance_id in ("i-4", "i-5")]
    assert {(j.action, j.status) for j in pool} >= {("skip", "skipped")}
    assert all(j.action not in ("stop", "scale_in") for j in pool)
    assert all("gke pool" in j.detail and "autoscaler" in j.detail
               for j in pool if j.action == "skip")
    # the refusal is journaled once per episode, not every cycle
    assert len([j for j in pool if j.action == "skip"]) == 2


def _alerts(db: Database, kind: str) -> list[str]:
    from sqlmodel import select

    from costguard.store.tables import AlertRow

    with db.session() as s:
        return [a.subject for a in s.exec(select(AlertRow).where(AlertRow.kind == kind))]


def _scale_in_engine(cloud: ScriptedCloud) -> Engine:
    text = ("policies:\n  - name: idle\n    mode: enforce\n"
            "    filters: {gpu: true, state: running}\n"
            "    condition:\n      idle: {below: 5, for: 30m}\n    actions:\n"
            "      - notify: {to: owner}\n" + STEPS["scale_in"])
    return Engine(Settings(), Database("sqlite://"), {"sim": cloud}, parse_policy_text(text),
                  cloud.clock, alert_printer=lambda kind, subject, body: None)


def test_a_group_that_replaces_a_scaled_in_member_raises_an_alert_the_next_cycle() -> None:
    cloud = _cloud([Box("asg-a", False), Box("asg-a", True), Box("asg-a", True)],
                   dict.fromkeys(GROUPS, 1))
    engine = _scale_in_engine(cloud)
    while not cloud.acted_on:
        engine.run_cycle()
        cloud.clock.advance(timedelta(minutes=10))
    assert cloud.acted_on == [("scale_in", "i-0")] and cloud.groups["asg-a"][0] == 2
    # the group's autoscaler puts the capacity back
    cloud.groups["asg-a"][0] = 3
    cloud.add("i-new", BUSY, owner=Owner(kind=OwnerKind.ASG, name="asg-a", via="test"))
    summary = engine.run_cycle()
    assert summary.actions["replaced"] == 1
    [subject] = _alerts(engine.db, "replaced")
    assert subject == "asg asg-a replaced what costguard scaled in (idle)"
    cloud.clock.advance(timedelta(minutes=10))
    assert engine.run_cycle().actions["replaced"] == 0  # checked once


def test_a_group_that_stays_shrunk_raises_nothing() -> None:
    cloud = _cloud([Box("asg-a", False), Box("asg-a", True)], dict.fromkeys(GROUPS, 0))
    engine = _scale_in_engine(cloud)
    for _ in range(8):
        engine.run_cycle()
        cloud.clock.advance(timedelta(minutes=10))
    assert cloud.acted_on == [("scale_in", "i-0")]
    assert _alerts(engine.db, "replaced") == []


def test_a_member_without_a_team_tag_is_attributed_to_its_groups_team() -> None:
    from costguard.costs.attribution import Attributor
    from costguard.report.queries import spend

    cloud = full_cloud(ManualClock(T0))
    group = Owner(kind=OwnerKind.ASG, name="asg-a", via="test",
                  tags={"team": "recsys", "owner": "ivo@example.com"})
    cloud.add("i-0", BUSY, tags={"Name": "member"}, owner=group)  # no team of its own
    cloud.add("i-1", BUSY, tags={"team": "vision"}, owner=group)  # its own tag wins
    cloud.add("i-2", BUSY, tags={})  # a pet without tags stays unattributed
    engine = _scale_in_engine(cloud)
    run_for(engine, cloud.clock, timedelta(hours=2), step=timedelta(minutes=10))
    with engine.db.session() as s:
        teams = {r.key[0]: r.cost_micros for r in
                 spend(s, ["team"], T0, T0 + timedelta(hours=3)).rows}
    assert set(teams) == {"recsys", "vision", "unattributed"}
    assert teams["recsys"] == teams["vision"] == teams["unattributed"] > 0
    dims = Attributor().dimensions(cloud.instances["i-0"])
    assert dims["team"] == "recsys"


def test_stop_now_from_slack_never_stops_a_member() -> None:
    """The Slack button makes a warned member due now: it is scaled in, never stopped; on a
    member the policy only reports, the click changes nothing."""
    from costguard.alerts.snooze import request_stop

    fleet = [Box("asg-a", False), Box("asg-a", False), Box("pool", False)]
    cloud = _cloud(fleet, dict.fromkeys(GROUPS, 0))
    text = ("policies:\n  - name: idle\n    mode: enforce\n"
            "    filters: {gpu: true, state: running}\n"
            "    condition:\n      idle: {below: 5, for: 30m}\n    actions:\n"
            "      - notify: {to: owner}\n      - stop: {grace: 1d}\n"
            "      - scale_in: {grace: 1d}\n")
    engine = Engine(Settings(), Database("sqlite://"), {"sim": cloud}, parse_policy_text(text),
                    cloud.clock, alert_printer=lambda kind, subject, body: None)
    run_for(engine, cloud.clock, timedelta(minutes=50), step=timedelta(minutes=10))
    assert cloud.acted_on == []  # warned, deadline a day away
    now = cloud.clock.now()
    with engine.db.session() as s:
        assert request_stop(s, instance_id="i-0", policy="idle", now=now, who="U1")
        assert not request_stop(s, instance_id="i-2", policy="idle", now=now, who="U1")
    engine.run_cycle()
    assert cloud.acted_on == [("scale_in", "i-0")]
