"""What the act stage leaves behind, field by field: the journal rows, the alerts and the
policy state of each path through the state machine (warn, tag, stop, dry run, protect,
snooze, clear, cap, re-check). Found by mutation testing: a journal row or alert with a wrong
field is a wrong audit trail, and no end-to-end check of verdicts notices it (MUTATION.md)."""

from __future__ import annotations

from datetime import timedelta

from costguard.engine import Engine
from costguard.model import InstanceState
from costguard.store.db import Database
from tests.fakes.cloud import BUSY, IDLE, T0, ScriptedCloud, until
from tests.fakes.scenario import (
    alerts,
    idle_stop_policy,
    journal,
    make_engine,
    run_for,
    state_of,
)

TAG = ('      - tag: {set: {"costguard:idle-since": "{now}", "costguard:stop-at": "{deadline}"}}\n')
BODY_TAIL = ("Start it again when you need it; costguard will not stop it again unless it sits "
             "idle for the policy's window.")


def engine(made: list[Engine], tmp_path: object, cloud: ScriptedCloud, text: str) -> Engine:
    e = make_engine(f"sqlite:///{tmp_path}/trace.db", text, cloud)
    made.append(e)
    return e


def with_tag(text: str) -> str:
    return text.replace("      - stop:", TAG + "      - stop:")


def rows(db: Database) -> list[tuple[str, str, bool, str, float]]:
    return [(r.key, r.action, r.dry_run, r.status, r.usd_per_hour) for r in journal(db)]


def test_an_enforced_stop_leaves_its_whole_trace(made, tmp_path, cloud, clock) -> None:  # type: ignore[no-untyped-def]
    cloud.add("i-1", IDLE)
    text = with_tag(idle_stop_policy(then="terminate: {after_stopped: 7d}"))
    e = engine(made, tmp_path, cloud, text)
    run_for(e, clock, timedelta(minutes=20))
    assert rows(e.db) == [
        ("idle|sim|i-1|notify|1", "notify", False, "done", 4.0),
        ("idle|sim|i-1|tag|1", "tag", False, "done", 4.0),
        ("idle|sim|i-1|stop|1", "stop", False, "done", 4.0),
    ]
    notify, tag, stop = journal(e.db)
    deadline = T0 + timedelta(minutes=15)
    assert notify.detail == ("i-1 (i-1) will be stopped at 2026-11-02 08:15 UTC unless it gets "
                             "busy (idle)")
    assert (notify.intent_at, notify.result_at) == (T0, T0)
    assert tag.detail == ("set {'costguard:idle-since': '2026-11-02T08:00:00+00:00', "
                          "'costguard:stop-at': '2026-11-02T08:15:00+00:00'}")
    assert cloud.instances["i-1"].tags["costguard:stop-at"] == "2026-11-02T08:15:00+00:00"
    reason = stop.detail
    assert reason.startswith("idle: ") and (stop.intent_at, stop.result_at) == (deadline,
                                                                                deadline)
    assert cloud.acted_on == [("stop", "i-1")]

    warning, action = alerts(e.db)
    assert (warning.dedupe_key, warning.kind, warning.severity) == (
        "idle|sim|i-1|notify|1", "idle-warning", "warning")
    assert (warning.policy, warning.provider, warning.instance_id, warning.team,
            warning.owner) == ("idle", "sim", "i-1", "research", "ana@example.com")
    assert warning.recipients == ["email:ana@example.com"]
    assert warning.subject == notify.detail
    # the scripted cloud's readings carry no host figures: the stop says it judged the GPUs
    assert reason.endswith("; host activity not measured")
    assert warning.context == {
        "reason": reason,
        "evidence": reason.removeprefix("idle: ").removesuffix("; host activity not measured"),
        "usd_per_hour": 4.0,
        "deadline": "2026-11-02T08:15:00+00:00", "spot_savings_usd_per_hour": 2.5,
        "instance_type": "g5.xlarge"}
    assert (action.dedupe_key, action.kind, action.severity) == (
        "action|idle|sim|i-1|1", "action", "warning")
    assert (action.policy, action.provider, action.instance_id, action.team, action.owner) == (
        "idle", "sim", "i-1", "research", "ana@example.com")
    assert action.recipients == ["email:ana@example.com", "team:research"]
    assert action.subject == "i-1 (i-1) was stopped by costguard (idle)"
    assert action.body == (
        f"Why: {reason}\n{BODY_TAIL}\nWhile stopped it still costs $0.0200/h (100 GiB disk).\n"
        "If it stays stopped for 1w it will be terminated after a snapshot; start it, snooze "
        "it or tag it costguard:protect to keep it.")
    assert action.context == {"reason": reason, "instance_type": "g5.xlarge"}
    st = state_of(e.db, "idle", "i-1")
    assert st is not None
    assert (st.state, st.since, st.deadline, st.episode) == ("acted", deadline, deadline, 1)


def test_without_a_stopped_price_the_note_says_disks_are_still_billed(  # type: ignore[no-untyped-def]
        made, tmp_path, clock) -> None:
    cloud = ScriptedCloud(clock, 4.0, can_describe=True)
    cloud.add("i-1", IDLE)
    e = engine(made, tmp_path, cloud, idle_stop_policy())
    run_for(e, clock, timedelta(minutes=20))
    (action,) = alerts(e.db, "action")
    assert action.body.endswith(
        f"{BODY_TAIL}\nIts attached disks are still billed while it is stopped (their cost "
        "could not be read from sim).")


def test_a_dry_run_journals_what_it_would_do_and_changes_nothing(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock) -> None:
    cloud.add("i-1", IDLE)
    text = with_tag(idle_stop_policy()).replace("mode: enforce", "mode: dry-run")
    e = engine(made, tmp_path, cloud, text)
    run_for(e, clock, timedelta(minutes=20))
    assert rows(e.db) == [
        ("idle|sim|i-1|notify|1", "notify", True, "dry-run", 4.0),
        ("idle|sim|i-1|tag|1", "tag", True, "dry-run", 4.0),
        ("idle|sim|i-1|stop|1", "stop", True, "dry-run", 4.0),
    ]
    assert alerts(e.db) == [] and cloud.acted_on == []
    assert cloud.calls["stop-dry"] == 1 and cloud.calls["stop"] == 0
    assert "costguard:stop-at" not in cloud.instances["i-1"].tags
    st = state_of(e.db, "idle", "i-1")
    assert st is not None and st.state == "acted"


def test_a_protected_instance_is_journaled_once_and_never_touched(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock) -> None:
    cloud.add("i-1", IDLE, tags={"team": "research", "costguard:protect": "true"})
    e = engine(made, tmp_path, cloud, idle_stop_policy())
    run_for(e, clock, timedelta(minutes=30))
    assert rows(e.db) == [("idle|sim|i-1|skip|1", "skip", False, "skipped", 4.0)]
    assert journal(e.db)[0].detail == "costguard:protect tag: never acted on"
    st = state_of(e.db, "idle", "i-1")
    assert st is not None and (st.state, st.since, st.deadline) == ("protected", T0, None)
    assert alerts(e.db) == [] and cloud.acted_on == []
    cloud.set("i-1", tags={"team": "research"})  # unprotected: a fresh warning
    run_for(e, clock, timedelta(minutes=5))
    st = state_of(e.db, "idle", "i-1")
    assert st is not None and st.state == "warned"
    assert [r.action for r in journal(e.db)] == ["skip", "notify"]


def test_a_snooze_beyond_the_policys_limit_is_cut_and_said(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock) -> None:
    cloud.add("i-1", IDLE, tags={"owner": "ana@example.com",
                                 "costguard:snooze-until": "2026-11-09T08:00:00Z"})
    e = engine(made, tmp_path, cloud, idle_stop_policy(max_snooze="2h"))
    run_for(e, clock, timedelta(minutes=10))
    (snooze,) = journal(e.db)
    assert (snooze.key, snooze.action, snooze.status, snooze.dry_run) == (
        "idle|sim|i-1|snooze|1", "snooze", "skipped", False)
    assert snooze.detail == ("snoozed until 2026-11-02T10:00:00+00:00 (cut from "
                             "2026-11-09T08:00:00+00:00 to the policy's max_snooze)")
    st = state_of(e.db, "idle", "i-1")
    assert st is not None and (st.state, st.snooze_until) == ("snoozed",
                                                               T0 + timedelta(hours=2))
    run_for(e, clock, timedelta(hours=2))  # spent: a fresh episode is warned
    st = state_of(e.db, "idle", "i-1")
    assert st is not None and (st.state, st.episode) == ("warned", 2)
    assert [r.key for r in journal(e.db)][-1] == "idle|sim|i-1|notify|2"
    assert cloud.acted_on == []


def test_a_snooze_within_the_limit_is_kept_as_asked(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock) -> None:
    cloud.add("i-1", IDLE, tags={"costguard:snooze-until": "2026-11-02T09:00:00Z"})
    e = engine(made, tmp_path, cloud, idle_stop_policy(max_snooze="2h"))
    run_for(e, clock, timedelta(minutes=10))
    assert journal(e.db)[0].detail == "snoozed until 2026-11-02T09:00:00+00:00"


def test_a_snooze_spent_in_one_episode_does_not_spend_the_next_one_s(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock) -> None:
    """A tag snooze runs out and the warning follows; the instance gets busy (cleared), then
    idle again: the owner's new snooze tag is honoured, the old one's end forgotten."""
    busy = (T0 + timedelta(minutes=35), T0 + timedelta(hours=2))
    cloud.add("i-1", lambda minute: "busy" if busy[0] <= minute < busy[1] else "no_process",
              tags={"owner": "ana@example.com",
                    "costguard:snooze-until": "2026-11-02T08:30:00Z"})
    e = engine(made, tmp_path, cloud, idle_stop_policy(grace="4h", max_snooze="8h"))
    seen = []
    for _ in range(0, 3 * 60, 5):
        if clock.now() == T0 + timedelta(hours=2, minutes=30):
            cloud.set("i-1", tags={"owner": "ana@example.com",
                                   "costguard:snooze-until": "2026-11-02T14:00:00Z"})
        e.run_cycle()
        st = state_of(e.db, "idle", "i-1")
        assert st is not None
        if not seen or seen[-1] != (st.state, st.episode):
            seen.append((st.state, st.episode))
        clock.advance(timedelta(minutes=5))
    assert seen == [("snoozed", 1), ("warned", 2), ("cleared", 2), ("snoozed", 3)]
    assert [r.detail for r in journal(e.db) if r.action == "snooze"] == [
        "snoozed until 2026-11-02T08:30:00+00:00", "snoozed until 2026-11-02T14:00:00+00:00"]
    assert cloud.acted_on == []


def test_busy_again_while_warned_clears_and_tells_the_owner(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock) -> None:
    cloud.add("i-1", until(T0 + timedelta(minutes=2), "no_process", "busy"))
    e = engine(made, tmp_path, cloud, idle_stop_policy(grace="1h"))
    run_for(e, clock, timedelta(minutes=15))
    (cleared,) = alerts(e.db, "cleared")
    assert cleared.dedupe_key == "cleared|idle|sim|i-1|1"
    assert (cleared.policy, cleared.provider, cleared.instance_id, cleared.team, cleared.owner,
            cleared.recipients) == (
        "idle", "sim", "i-1", "research", "ana@example.com", ["email:ana@example.com"])
    assert cleared.subject == "i-1 (i-1) is busy again: shutdown cancelled (idle)"
    assert cleared.body.startswith("Now: not idle (")
    st = state_of(e.db, "idle", "i-1")
    assert st is not None and (st.state, st.deadline) == ("cleared", None)
    assert cloud.acted_on == []


def test_busy_again_while_snoozed_clears_without_telling_anyone(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock) -> None:
    """An all-clear goes only to an owner who was warned: one who snoozed was told nothing
    would happen, so an instance busy again in its snooze is cleared silently."""
    cloud.add("i-1", until(T0 + timedelta(minutes=12), "no_process", "busy"),
              tags={"owner": "ana@example.com",
                    "costguard:snooze-until": "2026-11-02T10:00:00Z"})
    e = engine(made, tmp_path, cloud, idle_stop_policy(grace="1h", max_snooze="8h"))
    states = []
    for _ in range(6):
        e.run_cycle()
        st = state_of(e.db, "idle", "i-1")
        assert st is not None
        states.append(st.state)
        clock.advance(timedelta(minutes=5))
    assert states[0] == "snoozed" and states[-1] == "cleared"
    assert "warned" not in states
    assert alerts(e.db, "cleared") == []
    assert alerts(e.db, "idle-warning") == []
    assert cloud.acted_on == []


def test_a_batch_beyond_the_cap_acts_on_none_and_says_why(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock) -> None:
    cloud.add("i-1", IDLE)
    cloud.add("i-2", IDLE)
    e = engine(made, tmp_path, cloud,
               idle_stop_policy() + "    limits: {max_actions_per_cycle: 1}\n")
    run_for(e, clock, timedelta(minutes=20))
    (cap,) = alerts(e.db, "cap")
    assert cap.dedupe_key == "cap|idle|stop|2026-11-02T08"
    assert (cap.severity, cap.policy) == ("critical", "idle")
    assert cap.subject == "idle: stop acted on none: 2 instances due, cap is 1 per cycle"
    assert cap.body == (
        "A policy that would act beyond its limits acts on nothing. Check the policy's "
        "filters, or raise `limits` (or the `safety` settings) if this is intended.")
    assert sorted(cap.context["instances"]) == ["i-1", "i-2"]
    skips = [r for r in journal(e.db) if r.action == "stop"]
    assert sorted((r.key, r.status, r.dry_run, r.usd_per_hour) for r in skips) == [
        ("idle|sim|i-1|stop|1", "skipped", False, 4.0),
        ("idle|sim|i-2|stop|1", "skipped", False, 4.0)]
    assert {r.detail for r in skips} == {"cap: 2 instances due, cap is 1 per cycle"}
    assert cloud.acted_on == [] and cloud.calls["stop"] == 0


def test_a_protect_tag_set_after_inventory_is_caught_by_the_re_check(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock) -> None:
    cloud.add("i-1", IDLE)
    e = engine(made, tmp_path, cloud, idle_stop_policy())
    run_for(e, clock, timedelta(minutes=15))

    def protect_now(point: str) -> None:
        if point == "after-intent":
            cloud.set("i-1", tags={"costguard:protect": "yes"})

    e.runner.fault = protect_now
    run_for(e, clock, timedelta(minutes=5))
    stop = [r for r in journal(e.db) if r.action == "stop"]
    assert [(r.status, r.detail) for r in stop] == [
        ("skipped", "re-check before stop: costguard:protect was set since the last inventory")]
    st = state_of(e.db, "idle", "i-1")
    assert st is not None and (st.state, st.deadline) == ("cleared", None)
    assert cloud.acted_on == [] and alerts(e.db, "action") == []


def test_an_instance_stopped_by_someone_else_meanwhile_is_not_stopped_again(  # type: ignore[no-untyped-def]
        made, tmp_path, clock) -> None:
    cloud = ScriptedCloud(clock, 4.0)  # no describe: the provider's stop checks the state
    cloud.add("i-1", IDLE)
    e = engine(made, tmp_path, cloud, idle_stop_policy())
    run_for(e, clock, timedelta(minutes=15))

    def stop_behind_our_back(point: str) -> None:
        if point == "after-intent":
            cloud.set("i-1", state=InstanceState.STOPPED)

    e.runner.fault = stop_behind_our_back
    run_for(e, clock, timedelta(minutes=5))
    (stop,) = [r for r in journal(e.db) if r.action == "stop"]
    assert (stop.status, stop.detail) == ("skipped", "is stopped")
    st = state_of(e.db, "idle", "i-1")
    assert st is not None and st.state == "cleared"
    assert cloud.acted_on == []


def test_a_busy_instance_is_never_warned(made, tmp_path, cloud, clock) -> None:  # type: ignore[no-untyped-def]
    cloud.add("i-1", BUSY)
    e = engine(made, tmp_path, cloud, idle_stop_policy())
    run_for(e, clock, timedelta(minutes=30))
    assert journal(e.db) == [] and alerts(e.db) == []


def test_a_failed_stop_call_is_journaled_as_failed_and_the_warning_stands(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock, monkeypatch) -> None:
    from costguard.errors import ProviderError

    cloud.add("i-1", IDLE)
    e = engine(made, tmp_path, cloud, idle_stop_policy())
    run_for(e, clock, timedelta(minutes=15))

    def refuse(instance, *, dry_run):  # type: ignore[no-untyped-def]
        raise ProviderError("sim", "us-east-1", "throttled")

    monkeypatch.setattr(cloud, "stop", refuse)
    run_for(e, clock, timedelta(minutes=5))
    (stop,) = [r for r in journal(e.db) if r.action == "stop"]
    assert (stop.status, stop.detail) == ("failed", "sim us-east-1: throttled")
    st = state_of(e.db, "idle", "i-1")
    assert st is not None and st.state == "warned"
    assert alerts(e.db, "action") == []


def test_an_instance_started_again_after_a_stop_is_a_new_episode(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock) -> None:
    cloud.add("i-1", IDLE)
    e = engine(made, tmp_path, cloud, idle_stop_policy())
    run_for(e, clock, timedelta(minutes=20))
    cloud.restart("i-1")
    run_for(e, clock, timedelta(minutes=50))
    st = state_of(e.db, "idle", "i-1")
    assert st is not None and st.episode == 2
    assert [r.key for r in journal(e.db) if r.action == "notify"] == [
        "idle|sim|i-1|notify|1", "idle|sim|i-1|notify|2"]


UNTAGGED = """\
policies:
  - name: require-team
    mode: enforce
    filters: {{state: [running, stopped]}}
    condition: {{missing_tags: [team]}}
    actions:
      - notify: {{to: owner}}
      - tag:
          set: {{"costguard:untagged-since": "{{now}}", "costguard:noticed-by": "{{policy}}"}}
          overwrite: {overwrite}
"""


def tag_then_lose_the_team(e: Engine, cloud: ScriptedCloud, clock) -> None:  # type: ignore[no-untyped-def]
    """An hour later someone tags i-1 with its team; an hour after that the tag is lost."""
    for team in ("research", None):
        clock.advance(timedelta(hours=1))
        tags = {k: v for k, v in cloud.instances["i-1"].tags.items() if k != "team"}
        cloud.set("i-1", tags=tags | ({"team": team} if team else {}))
        e.run_cycle()


def test_a_since_marker_keeps_its_first_time_across_episodes(made, tmp_path, cloud,  # type: ignore[no-untyped-def]
                                                             clock) -> None:
    cloud.add("i-1", IDLE, tags={"owner": "ana@example.com"})
    e = engine(made, tmp_path, cloud, UNTAGGED.format(overwrite="false"))
    e.run_cycle()
    first = cloud.instances["i-1"].tags["costguard:untagged-since"]
    assert first == "2026-11-02T08:00:00+00:00"
    tag_then_lose_the_team(e, cloud, clock)  # a new episode, noticed again
    assert state_of(e.db, "require-team", "i-1").episode == 2  # type: ignore[union-attr]
    assert cloud.instances["i-1"].tags["costguard:untagged-since"] == first
    tags = [r for r in journal(e.db, "i-1") if r.action == "tag"]
    assert [t.detail for t in tags] == [
        "set {'costguard:untagged-since': '2026-11-02T08:00:00+00:00', "
        "'costguard:noticed-by': 'require-team'}"]  # the second episode had nothing to write


def test_a_tag_action_overwrites_by_default(made, tmp_path, cloud, clock) -> None:  # type: ignore[no-untyped-def]
    cloud.add("i-1", IDLE, tags={"owner": "ana@example.com"})
    e = engine(made, tmp_path, cloud, UNTAGGED.format(overwrite="true"))
    e.run_cycle()
    tag_then_lose_the_team(e, cloud, clock)
    assert cloud.instances["i-1"].tags["costguard:untagged-since"] == "2026-11-02T10:00:00+00:00"


def test_a_tag_only_policy_has_no_deadline_to_write(made, tmp_path, cloud, clock) -> None:  # type: ignore[no-untyped-def]
    """{deadline} is the stop's: a policy that only tags (and notifies) writes it empty."""
    cloud.add("i-1", IDLE, tags={"owner": "ana@example.com"})
    text = UNTAGGED.format(overwrite="true").replace(
        '"costguard:noticed-by": "{policy}"', '"costguard:stop-at": "{deadline}"')
    e = engine(made, tmp_path, cloud, text)
    e.run_cycle()
    tags = cloud.instances["i-1"].tags
    assert tags["costguard:untagged-since"] == "2026-11-02T08:00:00+00:00"
    assert tags["costguard:stop-at"] == ""


def test_a_snooze_set_while_warned_is_limited_from_when_it_was_seen(  # type: ignore[no-untyped-def]
        made, tmp_path, cloud, clock) -> None:
    """The owner snoozes ten minutes into the warning: max_snooze counts from then, not
    from the warning."""
    cloud.add("i-1", IDLE, tags={"owner": "ana@example.com"})
    e = engine(made, tmp_path, cloud, idle_stop_policy(max_snooze="2h", grace="30m"))
    e.run_cycle()
    st = state_of(e.db, "idle", "i-1")
    assert st is not None and st.state == "warned"
    clock.advance(timedelta(minutes=10))
    seen = clock.now()
    cloud.set("i-1", tags=cloud.instances["i-1"].tags
              | {"costguard:snooze-until": "2026-11-09T08:00:00Z"})
    e.run_cycle()
    st = state_of(e.db, "idle", "i-1")
    assert st is not None and (st.state, st.snooze_until) == ("snoozed",
                                                               seen + timedelta(hours=2))
    assert cloud.acted_on == []
