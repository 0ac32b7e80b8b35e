"""The act stage's per-policy counts (what `run --once` and the daemon's metrics report) and
its log lines, one per path: every warned, stopped, skipped and cleared instance counts once
(found by mutation testing: see MUTATION.md)."""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta

import pytest
from sqlmodel import select

from costguard.clock import ManualClock
from costguard.engine import Engine
from costguard.model import InstanceState, Owner, OwnerKind
from costguard.store.tables import FindingRow
from tests.fakes.cloud import BUSY, IDLE, T0, ScriptedCloud, until
from tests.fakes.scenario import alerts, idle_stop_policy, journal, make_engine, state_of


def counted(made: list[Engine], tmp_path: object, cloud: ScriptedCloud, clock: ManualClock,
            text: str, minutes: int) -> dict[str, Counter[str]]:
    """Each action's per-policy count, summed over one cycle every 5 minutes."""
    e = make_engine(f"sqlite:///{tmp_path}/counts.db", text, cloud)
    made.append(e)
    total: dict[str, Counter[str]] = {}
    end = clock.now() + timedelta(minutes=minutes)
    while clock.now() < end:
        for verb, by in e.run_cycle().actions.items():
            if isinstance(by, dict):
                total.setdefault(verb, Counter()).update(by)
        clock.advance(timedelta(minutes=5))
    return total


def test_two_idle_instances_are_warned_and_stopped_twice(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock, caplog) -> None:
    cloud.add("i-1", IDLE)
    cloud.add("i-2", IDLE)
    with caplog.at_level(logging.INFO, logger="costguard.act"):
        got = counted(made, tmp_path, cloud, clock, idle_stop_policy(), 20)
    assert (got["warned"], got["stopped"], got["skipped"]) == (
        Counter(idle=2), Counter(idle=2), Counter())
    assert "stop i-1 (i-1) (idle): done " in caplog.messages  # the scripted cloud says no more


def test_stops_skipped_at_the_cap_are_counted_each(made, tmp_path, cloud, clock) -> None:  # type: ignore[no-untyped-def]
    cloud.add("i-1", IDLE)
    cloud.add("i-2", IDLE)
    text = idle_stop_policy() + "    limits: {max_actions_per_cycle: 1}\n"
    got = counted(made, tmp_path, cloud, clock, text, 20)
    assert (got["skipped"], got["stopped"]) == (Counter(idle=2), Counter())


def test_a_stop_the_re_check_refuses_is_skipped_once_and_logged_with_why(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock, caplog) -> None:
    cloud.add("i-1", IDLE)
    e = make_engine(f"sqlite:///{tmp_path}/refused.db", idle_stop_policy(), cloud)
    made.append(e)
    for _ in range(3):  # warned, then due at 15 min
        e.run_cycle()
        clock.advance(timedelta(minutes=5))

    def protect_now(point: str) -> None:  # set after inventory: only the re-check sees it
        if point == "after-intent":
            cloud.set("i-1", tags={"costguard:protect": "yes"})

    e.runner.fault = protect_now
    with caplog.at_level(logging.INFO, logger="costguard.act"):
        skipped = Counter(e.run_cycle().actions["skipped"])
    assert skipped == Counter(idle=1)
    assert caplog.messages.count("stop i-1 (i-1) (idle): skipped: costguard:protect was set "
                                 "since the last inventory") == 1


def test_two_instances_busy_again_are_cleared_twice(made, tmp_path, cloud, clock) -> None:  # type: ignore[no-untyped-def]
    for iid in ("i-1", "i-2"):
        cloud.add(iid, until(T0 + timedelta(minutes=2), "no_process", "busy"))
    got = counted(made, tmp_path, cloud, clock, idle_stop_policy(grace="1h"), 15)
    assert (got["warned"], got["cleared"]) == (Counter(idle=2), Counter(idle=2))


def test_a_policy_without_a_stop_raises_a_finding_not_a_warning(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock) -> None:
    cloud.add("i-1", IDLE)
    text = idle_stop_policy().replace("      - stop: {grace: 15m}\n", "")
    counted(made, tmp_path, cloud, clock, text, 10)
    (found,) = alerts(made[0].db, "finding")
    assert (found.severity, found.policy, found.instance_id) == ("info", "idle", "i-1")
    assert alerts(made[0].db, "idle-warning") == []


def test_a_warned_instance_stopped_by_someone_else_is_cleared_once(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock) -> None:
    cloud.add("i-1", IDLE)
    e = make_engine(f"sqlite:///{tmp_path}/gone.db", idle_stop_policy(grace="1h"), cloud)
    made.append(e)
    warned: Counter[str] = Counter()
    for _ in range(2):
        warned.update(e.run_cycle().actions["warned"])
        clock.advance(timedelta(minutes=5))
    cloud.set("i-1", state=InstanceState.STOPPED)  # the policy selects running ones only
    cleared = Counter(e.run_cycle().actions["cleared"])
    assert (warned, cleared) == (Counter(idle=1), Counter(idle=1))
    st = state_of(e.db, "idle", "i-1")
    assert st is not None and (st.state, st.deadline) == ("cleared", None)


def test_every_step_up_to_the_terminate_warning_is_journaled_with_its_cycle(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock) -> None:
    cloud.add("i-1", IDLE)
    text = idle_stop_policy(then="terminate: {after_stopped: 1h, snapshot: false}")
    e = make_engine(f"sqlite:///{tmp_path}/after.db", text, cloud)
    made.append(e)
    cycles = {}
    for _ in range(5):
        summary = e.run_cycle()
        cycles[summary.started_at] = summary.cycle_id
        clock.advance(timedelta(minutes=5))
    steps = [(r.action, r.intent_at, r.cycle_id) for r in journal(e.db)]
    # warned at 0, stopped at 15 min, and the terminate warning (after the stop) then too
    assert steps == [("notify", T0, cycles[T0]),
                     ("stop", T0 + timedelta(minutes=15), cycles[T0 + timedelta(minutes=15)]),
                     ("notify", T0 + timedelta(minutes=15), cycles[T0 + timedelta(minutes=15)])]
    assert None not in cycles.values()
    with e.db.session() as s:
        found = [(r.observed_at, r.cycle_id, r.team) for r in s.exec(select(FindingRow))]
    # the finding is the cycle's that made it, and its team the instance's (its `team` tag,
    # as attribution reads it: what `report` groups findings by)
    assert found == [(T0, cycles[T0], "research")]


def test_protected_instances_are_skipped_each_and_the_others_still_warned(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock) -> None:
    for iid in ("i-1", "i-2"):
        cloud.add(iid, IDLE)
        cloud.set(iid, tags={**cloud.instances[iid].tags, "costguard:protect": "yes"})
    cloud.add("i-3", IDLE)
    got = counted(made, tmp_path, cloud, clock, idle_stop_policy(grace="1h"), 5)
    assert (got["skipped"], got["warned"]) == (Counter(idle=2), Counter(idle=1))


def test_instances_snoozed_in_one_cycle_are_skipped_each(made, tmp_path, cloud, clock) -> None:  # type: ignore[no-untyped-def]
    for iid in ("i-1", "i-2"):
        cloud.add(iid, IDLE, tags={"costguard:snooze-until": "2026-11-02T09:00:00Z"})
    got = counted(made, tmp_path, cloud, clock, idle_stop_policy(), 5)
    assert (got["skipped"], got.get("warned", Counter())) == (Counter(idle=2), Counter())


@pytest.mark.parametrize("mode", ["enforce", "dry-run"])
def test_a_notify_only_policy_counts_each_notice_and_is_done_with_the_episode(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock, mode) -> None:
    cloud.add("i-1", IDLE)
    cloud.add("i-2", IDLE)
    text = idle_stop_policy().replace("      - stop: {grace: 15m}\n", "").replace(
        "mode: enforce", f"mode: {mode}")
    got = counted(made, tmp_path, cloud, clock, text, 10)
    two = Counter(idle=2)
    assert (got["notified"], got["dry_run"]) == (
        (two, Counter()) if mode == "enforce" else (Counter(), two))
    st = state_of(made[0].db, "idle", "i-1")
    assert st is not None and st.state == "acted"


def test_snoozed_and_managed_instances_do_not_hold_up_the_ones_after_them(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock) -> None:
    cloud.add("i-1", IDLE, tags={"team": "research", "owner": "ana@example.com",
                                 "costguard:snooze-until": "2026-11-09T08:00:00Z"})
    cloud.add("i-2", IDLE, owner=Owner(kind=OwnerKind.ASG, name="asg-a", via="test"))
    cloud.add("i-3", IDLE)
    got = counted(made, tmp_path, cloud, clock, idle_stop_policy(grace="1h"), 5)
    assert got["warned"] == Counter(idle=1)
    st = state_of(made[0].db, "idle", "i-3")
    assert st is not None and st.state == "warned"


def test_a_busy_instance_does_not_hold_up_an_idle_one_after_it(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock) -> None:
    cloud.add("i-1", BUSY)
    cloud.add("i-2", IDLE)
    got = counted(made, tmp_path, cloud, clock, idle_stop_policy(grace="1h"), 5)
    assert got["warned"] == Counter(idle=1)


def test_a_dry_run_policy_s_warnings_are_counted_as_would_warn(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock) -> None:
    # `run --once` printed "warned 16" for dry-run policies, though no alert went out
    cloud.add("i-1", IDLE)
    text = idle_stop_policy(grace="1h").replace("mode: enforce", "mode: dry-run")
    got = counted(made, tmp_path, cloud, clock, text, 5)
    assert (got.get("warned", Counter()), got["would_warn"]) == (Counter(), Counter(idle=1))
    e = made[0]
    clock.advance(timedelta(minutes=5))
    lines = "\n".join(e.run_cycle().lines())
    assert "warned" not in lines.replace("would warn", "")
