"""The act stage's lanes (actions/lanes.py): policies of different clouds act side by side,
take the cycle's budget in policy order, write the store one transaction at a time, and an
error in one lane stops the stage."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import pytest
from sqlmodel import Session, select

from costguard.actions.lanes import Stopped, Turnstile, lanes, may_take, takes_once
from costguard.actions.runner import ActionRunner
from costguard.actions.settings import SafetySettings
from costguard.actions.stats import ActStats
from costguard.clock import ManualClock
from costguard.costs.attribution import Attributor
from costguard.model import ActionResult, Instance, ProviderName
from costguard.policy.evaluate import Finding
from costguard.policy.load import parse_policy_text
from costguard.policy.schema import Policy
from costguard.store.db import Database
from costguard.store.inventory import record_inventory
from costguard.store.tables import ActionJournalRow
from tests.fakes.cloud import T0, BatchCloud

WAIT = 10.0  # seconds a fake waits for the other lane before giving up (a failed test)


def _policy(name: str, provider: str | None, *, tag: bool = False) -> str:
    return (f"  - name: {name}\n"
            + (f"    providers: [{provider}]\n" if provider else "")
            + "    mode: enforce\n"
            "    condition: {idle: {for: 1h}}\n"
            "    actions:\n"
            + ('      - tag: {set: {"costguard:idle-since": "{now}"}}\n' if tag else "")
            + "      - stop: {grace: 0m}\n")


NOTICE_ONLY = ("  - name: aws-notice\n    providers: [aws]\n    mode: enforce\n"
               "    condition: {idle: {for: 1h}}\n    actions:\n      - notify: {to: [owner]}\n")


def _policies(*blocks: str) -> list[Policy]:
    return list(parse_policy_text("policies:\n" + "".join(blocks)).policies)


class Held(BatchCloud):
    """A batch cloud whose stop_many (and, with `slow_recheck`, describe_many) can be held,
    and which records the thread each call ran in."""

    def __init__(self, clock: ManualClock, provider: ProviderName) -> None:
        super().__init__(clock, can_describe=True, provider=provider)
        self.before_stop = lambda: None
        self.before_recheck = lambda: None
        self.slow_recheck = 0.0
        self.threads: set[str] = set()

    def describe_many(self, instances: Sequence[Instance]) -> dict[str, Instance | None]:
        self.before_recheck()
        time.sleep(self.slow_recheck)
        return super().describe_many(instances)

    def stop_many(self, instances: Sequence[Instance], *, dry_run: bool
                  ) -> dict[str, ActionResult]:
        self.threads.add(threading.current_thread().name)
        self.before_stop()
        return super().stop_many(instances, dry_run=dry_run)


def _meet(clouds: dict[str, Held], hook: str) -> list[bool]:
    """Make each cloud's `hook` (before_stop, before_recheck) wait until the other cloud's is
    running too; the list that comes back says, per call, whether the other one came."""
    in_flight = {name: threading.Event() for name in clouds}
    met: list[bool] = []
    for name, cloud in clouds.items():
        other = "gcp" if name == "aws" else "aws"

        def both(mine: threading.Event = in_flight[name],
                 theirs: threading.Event = in_flight[other]) -> None:
            mine.set()
            met.append(theirs.wait(WAIT))

        setattr(cloud, hook, both)
    return met


class Sessions:
    """The store, counting its sessions open at once."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.open = 0
        self.most = 0
        self._lock = threading.Lock()

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._lock:
            self.open += 1
            self.most = max(self.most, self.open)
        try:
            with self.db.session() as s:
                yield s
        finally:
            with self._lock:
                self.open -= 1


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    yield database
    database.dispose()


def _fleet(db: Database, clouds: dict[str, Held], per_cloud: int) -> dict[str, list[Instance]]:
    fleet = {name: [cloud.add(f"{name}-{n}") for n in range(per_cloud)]
             for name, cloud in clouds.items()}
    with db.session() as s:
        for name, instances in fleet.items():
            record_inventory(s, name, instances, T0, complete=False)
    return fleet


def _findings(policies: list[Policy], fleet: dict[str, list[Instance]]) -> list[Finding]:
    return [Finding(policy=p, instance=i, holds=True, reason="idle for 1h",
                    evidence="util_gpu 0%", usd_per_hour=1.0)
            for p in policies for name in fleet if name in (p.providers or fleet)
            for i in fleet[name]]


def _runner(db: object, clouds: dict[str, Held], max_actions: int = 1000
            ) -> ActionRunner:
    safety = SafetySettings(max_actions_per_cycle=max_actions, max_usd_per_hour_per_cycle=None)
    return ActionRunner(cast(Database, db), dict(clouds), Attributor(), safety=safety)


def _stops(db: Database) -> dict[str, str]:
    with db.session() as s:
        return {f"{j.policy}/{j.instance_id}": j.status for j in s.exec(
            select(ActionJournalRow).where(ActionJournalRow.action == "stop"))}


def test_lanes_group_the_policies_that_may_act_on_a_common_provider() -> None:
    aws, gcp, both, every = (_policies(_policy("a", "aws")), _policies(_policy("g", "gcp")),
                             _policies(_policy("b", "aws, gcp")), _policies(_policy("e", None)))
    assert lanes(aws + gcp + aws) == [[0, 2], [1]]
    assert lanes(gcp + aws + gcp + aws) == [[0, 2], [1, 3]]
    assert lanes(aws + gcp + both) == [[0, 1, 2]]  # one policy joins both clouds
    assert lanes(aws + every + gcp) == [[0, 1, 2]]  # no `providers`: every one
    assert lanes([]) == []


def test_policies_of_two_clouds_act_at_once_and_write_the_store_one_at_a_time(
    db: Database, clock: ManualClock
) -> None:
    clouds = {"aws": Held(clock, "aws"), "gcp": Held(clock, "gcp")}
    met = _meet(clouds, "before_stop")
    fleet = _fleet(db, clouds, per_cloud=3)
    # the aws lane's notice-only policy, before gcp's in order, never holds gcp's stops back
    policies = _policies(_policy("aws-idle", "aws", tag=True), NOTICE_ONLY,
                         _policy("gcp-idle", "gcp"))
    sessions = Sessions(db)
    runner = _runner(sessions, clouds)
    lane_threads: set[str] = set()
    runner.fault = lambda point: lane_threads.add(threading.current_thread().name)

    stats = runner.run(policies, _findings(policies, fleet), T0, None)

    assert met == [True, True]  # both stops were in flight at the same time
    assert len(lane_threads) == 2 and all(t.startswith("costguard-act") for t in lane_threads)
    assert stats.notified == {"aws-notice": 3}
    assert sessions.most == 1  # while the store saw one transaction at a time
    assert stats.stopped == {"aws-idle": 3, "gcp-idle": 3}  # each lane's counts, added
    assert stats.tagged == {"aws-idle": 3} and stats.warned == {"aws-idle": 3, "gcp-idle": 3}
    assert set(_stops(db).values()) == {"done"} and len(_stops(db)) == 6
    assert clouds["aws"].threads.isdisjoint(clouds["gcp"].threads)


def test_one_lane_runs_in_the_callers_thread(db: Database, clock: ManualClock) -> None:
    clouds = {"aws": Held(clock, "aws"), "gcp": Held(clock, "gcp")}
    fleet = _fleet(db, clouds, per_cloud=2)
    # a policy for every provider joins the others into one lane
    policies = _policies(_policy("aws-idle", "aws"), _policy("any-idle", None))

    stats = _runner(db, clouds).run(policies, _findings(policies, fleet), T0, None)

    assert stats.stopped == {"aws-idle": 2, "any-idle": 2}  # gcp's two; aws's were stopped
    assert clouds["aws"].threads == clouds["gcp"].threads == {threading.current_thread().name}


def test_a_policy_over_both_clouds_re_checks_them_at_once(db: Database,
                                                           clock: ManualClock) -> None:
    clouds = {"aws": Held(clock, "aws"), "gcp": Held(clock, "gcp")}
    met = _meet(clouds, "before_recheck")
    fleet = _fleet(db, clouds, per_cloud=2)
    policies = _policies(_policy("any-idle", None))

    stats = _runner(db, clouds).run(policies, _findings(policies, fleet), T0, None)

    assert met == [True, True]
    assert stats.stopped == {"any-idle": 4}
    assert set(_stops(db).values()) == {"done"} and len(_stops(db)) == 4


def test_the_budget_goes_in_policy_order_whichever_cloud_answers_first(
    db: Database, clock: ManualClock
) -> None:
    clouds = {"aws": Held(clock, "aws"), "gcp": Held(clock, "gcp")}
    slow = iter([0.3])
    clouds["aws"].before_stop = lambda: time.sleep(next(slow, 0.0))  # the first stops slowly
    fleet = _fleet(db, clouds, per_cloud=2)
    policies = _policies(_policy("aws-first", "aws"), _policy("aws-second", "aws"),
                         _policy("gcp-idle", "gcp"))

    # room for two policies' two stops: the first two in order, though gcp's policy is
    # ready to take while aws's first still waits on its stops
    stats = _runner(db, clouds, max_actions=4).run(policies, _findings(policies, fleet), T0,
                                                    None)

    assert stats.stopped == {"aws-first": 2}  # aws-second found them stopped already
    assert stats.skipped == {"aws-second": 2, "gcp-idle": 2}
    assert clouds["gcp"].calls["stop_many"] == 0
    with db.session() as s:
        refused = {j.policy: j.detail for j in s.exec(select(ActionJournalRow).where(
            ActionJournalRow.action == "stop", ActionJournalRow.status == "skipped"))}
    assert "fleet-wide per-cycle cap" in refused["gcp-idle"]
    assert "cap" not in refused["aws-second"]


def test_an_error_in_one_lane_stops_the_other_at_its_next_policy_and_is_raised(
    db: Database, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    clouds = {"aws": Held(clock, "aws"), "gcp": Held(clock, "gcp")}
    stopped = threading.Event()
    stop = Turnstile.stop

    def stopping(self: Turnstile) -> None:
        stop(self)
        stopped.set()

    monkeypatch.setattr(Turnstile, "stop", stopping)

    gcp_acting = threading.Event()

    def broken() -> None:  # once gcp's first policy is acting
        gcp_acting.wait(WAIT)
        raise RuntimeError("the aws lane broke")

    def acting() -> None:  # until the aws lane has failed
        gcp_acting.set()
        if not stopped.wait(WAIT):
            pytest.fail("the aws lane did not stop the stage")

    clouds["aws"].before_stop = broken
    # gcp's first policy is acting when the aws lane fails: it finishes; its next one never runs
    clouds["gcp"].before_stop = acting
    fleet = _fleet(db, clouds, per_cloud=2)
    # gcp's second policy only tags: it never waits on the budget, yet never runs; it comes
    # before the failed one in order, and is no error of its own
    tag_only = _policy("gcp-second", "gcp", tag=True).replace("      - stop: {grace: 0m}\n", "")
    policies = _policies(_policy("gcp-first", "gcp"), tag_only, _policy("aws-idle", "aws"))

    with pytest.raises(RuntimeError, match="the aws lane broke"):
        _runner(db, clouds).run(policies, _findings(policies, fleet), T0, None)

    # the failed policy's stops stay intents (the next cycle reconciles them); the one
    # acting beside it finished and journaled its stops; the next policy never ran
    assert _stops(db) == {"aws-idle/aws-0": "intent", "aws-idle/aws-1": "intent",
                          "gcp-first/gcp-0": "done", "gcp-first/gcp-1": "done"}
    assert clouds["gcp"].calls["stop_many"] == 1
    assert clouds["gcp"].calls["tags_many"] == 0


def test_a_stopped_turnstile_lets_no_one_take() -> None:
    turnstile = Turnstile()
    turnstile.passed(0)
    turnstile.wait_for(1)  # policy 0 passed: policy 1 may take
    turnstile.stop()
    with pytest.raises(Stopped):
        turnstile.wait_for(1)
    with pytest.raises(Stopped):
        turnstile.check()


def test_when_two_lanes_fail_the_error_of_the_earliest_policy_is_raised(
    db: Database, clock: ManualClock
) -> None:
    clouds = {"aws": Held(clock, "aws"), "gcp": Held(clock, "gcp")}
    gcp_failed = threading.Event()

    def aws_fails() -> None:  # after gcp's, though its policy comes first
        gcp_failed.wait(WAIT)
        raise RuntimeError("aws failed second")

    def gcp_fails() -> None:
        gcp_failed.set()
        raise RuntimeError("gcp failed first")

    clouds["aws"].before_stop, clouds["gcp"].before_stop = aws_fails, gcp_fails
    fleet = _fleet(db, clouds, per_cloud=1)
    policies = _policies(_policy("aws-idle", "aws"), _policy("gcp-idle", "gcp"))

    with pytest.raises(RuntimeError, match="aws failed second"):
        _runner(db, clouds).run(policies, _findings(policies, fleet), T0, None)


def test_a_policy_with_nothing_due_lets_the_policies_after_it_take(
    db: Database, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    clouds = {"aws": Held(clock, "aws"), "gcp": Held(clock, "gcp")}
    fleet = _fleet(db, clouds, per_cloud=1)
    policies = _policies(_policy("aws-idle", "aws"), _policy("gcp-idle", "gcp"))
    findings = [f for f in _findings(policies, fleet) if f.instance.provider == "gcp"]
    made: list[Turnstile] = []
    init = Turnstile.__init__

    def kept(self: Turnstile) -> None:
        init(self)
        made.append(self)

    monkeypatch.setattr(Turnstile, "__init__", kept)
    done: list[ActStats] = []
    run = threading.Thread(target=lambda: done.append(
        _runner(db, clouds).run(policies, findings, T0, None)))
    run.start()
    run.join(WAIT)
    for turnstile in made:  # a stage left waiting is let go, so the test ends either way
        turnstile.stop()
    run.join(WAIT)

    assert done and done[0].stopped == {"gcp-idle": 1}


def test_which_policies_take_from_the_budget_and_how_often() -> None:
    def policy(actions: str) -> Policy:
        return _policies("  - name: p\n    condition: {outside_hours: {hours: \"08:00-19:00\"}}"
                         "\n    actions:\n" + actions)[0]

    notify = "      - notify: {to: [owner]}\n"
    tag = '      - tag: {set: {"costguard:seen": "{now}"}}\n'
    stop = "      - stop: {grace: 0m}\n"
    cases = {
        notify: (False, True), tag: (False, True), notify + tag: (False, True),
        stop: (True, True), tag + stop: (True, True),
        stop + "      - start: {at_office_hours: true}\n": (True, False),
        stop + "      - terminate: {after_stopped: 7d}\n": (True, False),
        "      - scale_in: {grace: 0m}\n": (True, True),
        "      - scale_to_zero: {restore_at_office_hours: true}\n": (True, False),
    }
    for actions, expected in cases.items():
        p = policy(actions)
        assert (may_take(p), takes_once(p)) == expected, actions


def test_a_turnstile_lets_a_policy_take_only_after_those_before_it_passed() -> None:
    turnstile = Turnstile()
    took = threading.Event()
    waiting = threading.Thread(target=lambda: (turnstile.wait_for(2), took.set()))
    waiting.start()
    turnstile.passed(1)  # out of order: policy 0 has not passed yet
    assert not took.wait(0.2)
    turnstile.passed(0)
    assert took.wait(WAIT)
    waiting.join(WAIT)


def test_lane_counts_add_up() -> None:
    a, b = ActStats(), ActStats()
    a.stopped["p"] += 1
    a.reconciled = 2
    b.stopped.update({"p": 2, "q": 1})
    b.reconciled = 1
    a.add(b)
    assert a.stopped == {"p": 3, "q": 1} and a.reconciled == 3


def test_a_policy_in_turn_takes_the_budget_as_it_names_its_batch() -> None:
    """The fleet-wide budget's refusal names what the batch is, through a lane's turn too
    (volumes, snapshots and addresses take from the same caps: costguard/standing/act.py)."""
    from costguard.actions.lanes import InTurn
    from costguard.actions.safety import CycleBudget

    turn = InTurn(CycleBudget(actions_left=1, usd_per_hour_left=None), Turnstile(), 0,
                  once=False)
    refused = turn.take([1.0, 1.0], noun="resources")
    assert refused.reason == ("2 resources due, 1 left of the fleet-wide per-cycle cap "
                              "(safety.max_actions_per_cycle)")
    assert turn.take([1.0, 1.0]).reason.startswith("2 instances due")
