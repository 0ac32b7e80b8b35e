"""Idle shutdown over simulated hours with an injected clock, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest

from costguard.clock import ManualClock
from tests.fakes.cloud import BUSY, DARK, OWNER_TAGS, T0, ScriptedCloud, full_cloud
from tests.fakes.scenario import alerts, idle_stop_policy, journal, make_engine, run_for, state_of

IDLE = idle_stop_policy(max_snooze="8h", message="spot would save ${spot_savings_usd_per_hour}/h")
# the owner's own words, with the stop's deadline in them
AT_DEADLINE = idle_stop_policy(message="we stop it at {deadline}; ask #gpu-help")


@pytest.fixture
def cloud() -> ScriptedCloud:
    return full_cloud(ManualClock(T0))


def test_idle_instance_is_warned_then_stopped_at_its_deadline(db_url: str,
                                                              cloud: ScriptedCloud) -> None:
    cloud.add("i-idle")
    engine = make_engine(db_url, IDLE, cloud)
    engine.run_cycle()  # the first cycle reads the last hour of metrics: idle all along
    st = state_of(engine.db, "idle", "i-idle")
    assert st is not None and st.state == "warned"
    assert st.deadline == T0 + timedelta(minutes=15)
    warning = alerts(engine.db, "idle-warning")[0]
    assert "costguard snooze i-idle" in warning.body and "Deadline:" in warning.body
    assert "spot would save $2.50/h" in warning.body  # 4.00 on demand - 1.50 spot
    run_for(engine, cloud.clock, timedelta(minutes=15))  # cycles up to T0+10m
    assert cloud.calls["stop"] == 0
    run_for(engine, cloud.clock, timedelta(minutes=5))
    assert cloud.instances["i-idle"].state == "stopped"
    stop = [j for j in journal(engine.db, "i-idle") if j.action == "stop"]
    assert [j.status for j in stop] == ["done"]
    assert stop[0].intent_at >= st.deadline
    assert cloud.calls["describe"] >= 1  # re-checked right before the call
    note = alerts(engine.db, "action")[0].body
    assert "still costs $0.0200/h" in note


def test_a_warning_message_names_the_stop_s_deadline(db_url: str,
                                                     cloud: ScriptedCloud) -> None:
    """{deadline} in a policy's message is the stop's deadline (a notice without a stop
    says none), as the warning's own Deadline line gives it."""
    cloud.add("i-idle")
    engine = make_engine(db_url, AT_DEADLINE, cloud)
    engine.run_cycle()
    body = alerts(engine.db, "idle-warning")[0].body
    deadline = (T0 + timedelta(minutes=15)).isoformat()
    assert f"we stop it at {deadline}; ask #gpu-help" in body.splitlines()
    assert f"Deadline: {deadline}" in body.splitlines()


def test_a_notice_without_a_stop_names_no_deadline(db_url: str, cloud: ScriptedCloud) -> None:
    """The same message in a policy that only notifies: there is no deadline to name."""
    notify_only = "\n".join(line for line in AT_DEADLINE.splitlines()
                            if "- stop:" not in line) + "\n"
    cloud.add("i-idle")
    engine = make_engine(db_url, notify_only, cloud)
    engine.run_cycle()
    body = alerts(engine.db, "finding")[0].body
    assert "we stop it at none; ask #gpu-help" in body.splitlines()


def test_warned_instance_that_gets_busy_is_cleared_and_not_stopped(db_url: str,
                                                                   cloud: ScriptedCloud) -> None:
    cloud.add("i-idle")
    engine = make_engine(db_url, IDLE, cloud)
    run_for(engine, cloud.clock, timedelta(minutes=10))
    assert state_of(engine.db, "idle", "i-idle").state == "warned"  # type: ignore[union-attr]
    cloud.phases["i-idle"] = BUSY
    run_for(engine, cloud.clock, timedelta(minutes=30))
    assert state_of(engine.db, "idle", "i-idle").state == "cleared"  # type: ignore[union-attr]
    assert cloud.instances["i-idle"].state == "running"
    assert cloud.calls["stop"] == 0
    assert alerts(engine.db, "cleared")


def test_protect_tag_set_after_inventory_is_honoured_by_the_recheck(db_url: str,
                                                                    cloud: ScriptedCloud) -> None:
    cloud.add("i-idle")
    engine = make_engine(db_url, IDLE, cloud)
    run_for(engine, cloud.clock, timedelta(minutes=15))  # warned, deadline T0+15m not reached
    # the owner tags it between the inventory and the stop call of the deadline cycle
    original = cloud.list_instances

    def list_then_protect():  # type: ignore[no-untyped-def]
        inv = original()
        cloud.set("i-idle", tags={**cloud.instances["i-idle"].tags, "costguard:protect": "1"})
        return inv

    cloud.list_instances = list_then_protect  # type: ignore[method-assign]
    run_for(engine, cloud.clock, timedelta(minutes=10))
    assert cloud.instances["i-idle"].state == "running"
    skipped = [j for j in journal(engine.db, "i-idle") if j.action == "stop"]
    assert skipped and "re-check before stop" in skipped[0].detail
    assert skipped[0].status == "skipped"


def test_snoozed_instance_waits_for_expiry_then_is_warned_again_and_stopped(
        db_url: str, cloud: ScriptedCloud) -> None:
    snooze_until = (T0 + timedelta(hours=3)).isoformat()
    cloud.add("i-idle", tags={**OWNER_TAGS, "costguard:snooze-until": snooze_until})
    engine = make_engine(db_url, IDLE, cloud)
    run_for(engine, cloud.clock, timedelta(hours=2, minutes=55), step=timedelta(minutes=15))
    assert state_of(engine.db, "idle", "i-idle").state == "snoozed"  # type: ignore[union-attr]
    assert cloud.instances["i-idle"].state == "running"
    run_for(engine, cloud.clock, timedelta(minutes=25))
    assert cloud.instances["i-idle"].state == "stopped"
    kinds = [(j.action, j.status) for j in journal(engine.db, "i-idle")]
    assert kinds.index(("snooze", "skipped")) < kinds.index(("notify", "done"))
    assert kinds[-1] == ("stop", "done")


def test_snooze_tag_longer_than_max_snooze_is_cut_short(db_url: str,
                                                         cloud: ScriptedCloud) -> None:
    snooze_until = (T0 + timedelta(days=30)).isoformat()
    cloud.add("i-idle", tags={**OWNER_TAGS, "costguard:snooze-until": snooze_until})
    engine = make_engine(db_url, IDLE, cloud)
    run_for(engine, cloud.clock, timedelta(hours=7, minutes=50), step=timedelta(minutes=15))
    assert cloud.instances["i-idle"].state == "running"
    snooze = next(j for j in journal(engine.db, "i-idle") if j.action == "snooze")
    assert "max_snooze" in snooze.detail
    run_for(engine, cloud.clock, timedelta(minutes=40))  # 8 h max + 15 min grace
    assert cloud.instances["i-idle"].state == "stopped"


def test_instance_without_telemetry_is_never_stopped(db_url: str, cloud: ScriptedCloud) -> None:
    cloud.add("i-dark", DARK)
    engine = make_engine(db_url, IDLE, cloud)
    run_for(engine, cloud.clock, timedelta(hours=3), step=timedelta(minutes=15))
    assert cloud.instances["i-dark"].state == "running"
    assert not [j for j in journal(engine.db) if j.action in ("stop", "notify")]


TERMINATE = idle_stop_policy(
    name="scratch", then="terminate: {after_stopped: 2d, warn_before: 12h, snapshot: true}")


def test_stopped_instance_is_warned_then_terminated_only_after_its_days_stopped(
        db_url: str, cloud: ScriptedCloud) -> None:
    cloud.add("i-scratch")
    engine = make_engine(db_url, TERMINATE, cloud)
    run_for(engine, cloud.clock, timedelta(hours=1, minutes=10))
    assert cloud.instances["i-scratch"].state == "stopped"
    run_for(engine, cloud.clock, timedelta(hours=35), step=timedelta(hours=1))
    assert cloud.instances["i-scratch"].state == "stopped"
    assert not alerts(engine.db, "terminate-warning")
    run_for(engine, cloud.clock, timedelta(hours=2), step=timedelta(hours=1))
    assert alerts(engine.db, "terminate-warning")
    assert cloud.instances["i-scratch"].state == "stopped"
    run_for(engine, cloud.clock, timedelta(hours=13), step=timedelta(hours=1))
    assert cloud.instances["i-scratch"].state == "terminated"
    term = [j for j in journal(engine.db, "i-scratch") if j.action == "terminate"]
    assert [j.status for j in term] == ["done"]


def test_instance_restarted_by_its_owner_is_not_terminated(db_url: str,
                                                           cloud: ScriptedCloud) -> None:
    cloud.add("i-scratch")
    engine = make_engine(db_url, TERMINATE, cloud)
    run_for(engine, cloud.clock, timedelta(hours=1, minutes=10))
    assert cloud.instances["i-scratch"].state == "stopped"
    cloud.set("i-scratch", state="running")
    cloud.phases["i-scratch"] = BUSY
    run_for(engine, cloud.clock, timedelta(hours=2), step=timedelta(minutes=30))
    cloud.set("i-scratch", state="stopped")  # stopped by hand later: not costguard's stop
    run_for(engine, cloud.clock, timedelta(days=4), step=timedelta(hours=2))
    assert cloud.instances["i-scratch"].state == "stopped"
    assert cloud.calls["terminate"] == 0


def test_provider_without_terminate_journals_it_as_not_wired(db_url: str,
                                                             cloud: ScriptedCloud) -> None:
    cloud.can_terminate = False
    cloud.add("i-scratch")
    engine = make_engine(db_url, TERMINATE, cloud)
    run_for(engine, cloud.clock, timedelta(hours=1, minutes=10))
    run_for(engine, cloud.clock, timedelta(days=3), step=timedelta(hours=2))
    assert cloud.instances["i-scratch"].state == "stopped"
    skipped = [j for j in journal(engine.db, "i-scratch") if j.action == "terminate"]
    assert len(skipped) == 1 and "not wired" in skipped[0].detail
