"""One re-check per scope and act stage: a tag policy's re-check reads, with its own
instances, those a stop policy may stop later in the stage, and the stop takes those states
(`actions.batch.Rechecks`). What costguard writes in between is folded in, what it cannot
vouch for is read again, and nothing older than `safety.recheck_reuse_seconds` is used."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from sqlmodel import select

from costguard.actions.batch import Rechecks
from costguard.actions.runner import ActionRunner
from costguard.actions.settings import SafetySettings
from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.costs.attribution import Attributor
from costguard.engine import Engine
from costguard.errors import ProviderError
from costguard.model import Instance, InstanceState, Owner, OwnerKind
from costguard.policy.load import parse_policy_text
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow
from tests.fakes.cloud import BatchCloud, always

TWO_POLICIES = """\
policies:
  - name: tag-them
    mode: enforce
    filters: {{state: running}}
    condition: {{missing_tags: [{missing}]}}
    actions:
      - tag: {{set: {{{tag}}}}}
  - name: idle-gpu-stop
    mode: enforce
    filters: {{gpu: true, state: running}}
    condition:
      idle: {{below: 5, for: 45m}}
    actions:
      - stop: {{grace: 0m}}
    limits: {{max_actions_per_cycle: 10}}
"""


def _engine(db: Database, cloud: BatchCloud, clock: ManualClock, db_url: str, *,
            tag: str = '"costguard:untagged-since": "{now}"', missing: str = "cost-center",
            reuse: float | None = None) -> Engine:
    safety = SafetySettings() if reuse is None else SafetySettings(recheck_reuse_seconds=reuse)
    settings = Settings(database_url=db_url, policy_paths=[], safety=safety)
    text = TWO_POLICIES.format(tag=tag, missing=missing)
    return Engine(settings, db, {"sim": cloud}, parse_policy_text(text, "test.yml"), clock)


@pytest.fixture
def cloud(clock: ManualClock) -> BatchCloud:
    cloud = BatchCloud(clock)
    # three idle GPUs, two busy ones; none has a cost-center tag, so all five are tagged
    for n in range(3):
        cloud.add(f"i-idle{n}", always("no_process"))
    for n in range(2):
        cloud.add(f"i-busy{n}", always("busy"))
    return cloud


@pytest.mark.parametrize(("reuse", "describes"), [(None, 1), (0, 2)])
def test_a_tag_and_a_stop_in_one_stage_share_one_recheck(
    reuse: float | None, describes: int, cloud: BatchCloud, clock: ManualClock, db: Database,
    db_url: str
) -> None:
    engine = _engine(db, cloud, clock, db_url, reuse=reuse)
    # a first cycle reads the idle window's history: both policies act in it
    engine.run_cycle()

    assert cloud.calls["tags"] == 5 and cloud.calls["stop"] == 3
    assert all(cloud.instances[f"i-idle{n}"].state is InstanceState.STOPPED for n in range(3))
    # one re-check for both; with reuse off (0), each policy reads for itself
    assert cloud.calls["describe_many"] == describes
    assert len(engine.runner.rechecks) == 0  # nothing kept past the stage


def _mark_all_but(cloud: BatchCloud, key: str, *left: str) -> None:
    cloud.instances = {i: inst if i in left else
                       inst.model_copy(update={"tags": {**inst.tags, key: "no"}})
                       for i, inst in cloud.instances.items()}


def test_a_protect_tag_costguard_writes_is_seen_by_the_stop_after_it(
    cloud: BatchCloud, clock: ManualClock, db: Database, db_url: str
) -> None:
    # the tag policy protects two idle GPUs in the cycle the stop policy wants all three:
    # the shared re-check must carry the tag costguard just wrote
    _mark_all_but(cloud, "keep-running", "i-idle0", "i-idle1")
    engine = _engine(db, cloud, clock, db_url, tag='"costguard:protect": "true"',
                     missing="keep-running")
    engine.run_cycle()

    assert cloud.calls["tags"] == 2
    assert cloud.instances["i-idle0"].state is InstanceState.RUNNING
    assert cloud.instances["i-idle1"].state is InstanceState.RUNNING
    assert cloud.instances["i-idle2"].state is InstanceState.STOPPED
    assert cloud.calls["describe_many"] == 1  # the tag path's, shared


def test_a_tag_not_costguards_own_makes_the_stop_read_the_instance_again(
    cloud: BatchCloud, clock: ManualClock, db: Database, db_url: str
) -> None:
    _mark_all_but(cloud, "team2", "i-idle0")
    engine = _engine(db, cloud, clock, db_url, tag='"team": "unknown"', missing="team2")
    engine.run_cycle()

    assert cloud.calls["tags"] == 1 and cloud.calls["stop"] == 3
    # the tag path read i-idle0 and the other idle ones ahead; writing `team` (which could
    # name a controller) forgot i-idle0's state, so the stop read it again
    assert cloud.calls["describe_many"] == 2


def test_kept_states_age_out_and_errors_are_never_kept(cloud: BatchCloud) -> None:
    now = [100.0]
    a, b, c = (cloud.instances[i] for i in ("i-idle0", "i-idle1", "i-idle2"))
    rechecks = Rechecks(60, ahead=[a, b, c], monotonic=lambda: now[0])
    throttled = ProviderError("sim", "111111111111/us-east-1", "throttled")
    rechecks.keep("sim", {a.instance_id: a, b.instance_id: None, c.instance_id: throttled})
    found, rest = rechecks.recent([a, b, c])
    assert found == {a.instance_id: a, b.instance_id: None}  # gone is an answer too
    assert rest == [c]
    now[0] += 59.9
    assert rechecks.recent([a])[1] == []
    now[0] += 0.2
    assert rechecks.recent([a]) == ({}, [a])


def test_kept_states_take_costguards_own_tags_and_forget_others(cloud: BatchCloud) -> None:
    a, b = cloud.instances["i-idle0"], cloud.instances["i-idle1"]
    rechecks = Rechecks(60, ahead=[a, b])
    a = a.model_copy(update={"tags": {**a.tags, "costguard:idle-since": "then"}})
    rechecks.keep("sim", {a.instance_id: a, b.instance_id: b})
    rechecks.tagged([a], {"costguard:protect": "true"}, remove=["costguard:idle-since"])
    got = rechecks.recent([a])[0][a.instance_id]
    assert isinstance(got, Instance) and got.tags["costguard:protect"] == "true"
    assert "costguard:idle-since" not in got.tags and got.tags["team"] == a.tags["team"]
    # a key that is not costguard's own, written or taken away, could name a controller
    rechecks.tagged([b], {"costguard:x": "1", "karpenter.sh/nodepool": "p"}, remove=[])
    assert rechecks.recent([b]) == ({}, [b])
    rechecks.keep("sim", {b.instance_id: b})
    rechecks.tagged([b], {}, remove=["aws:autoscaling:groupName"])
    assert rechecks.recent([b]) == ({}, [b])
    rechecks.keep("sim", {a.instance_id: a, b.instance_id: b})
    rechecks.forget([a])
    assert rechecks.recent([a, b]) == ({b.instance_id: b}, [a])
    rechecks.clear()
    assert rechecks.recent([b]) == ({}, [b])


def test_reuse_zero_keeps_nothing(cloud: BatchCloud) -> None:
    rechecks = Rechecks(0, ahead=list(cloud.instances.values()))
    a = cloud.instances["i-idle0"]
    rechecks.keep("sim", {a.instance_id: a})
    assert rechecks.recent([a]) == ({}, [a])
    assert rechecks.with_ahead([a]) == [a]


def test_only_what_a_stop_may_ask_about_is_kept(cloud: BatchCloud) -> None:
    idle, busy = cloud.instances["i-idle0"], cloud.instances["i-busy0"]
    rechecks = Rechecks(60, ahead=[idle])
    rechecks.keep("sim", {idle.instance_id: idle, busy.instance_id: busy})
    assert len(rechecks) == 1 and rechecks.recent([busy]) == ({}, [busy])


def test_a_second_stop_policy_reads_what_the_first_stopped_and_leaves_it(
    cloud: BatchCloud, clock: ManualClock, db: Database, db_url: str
) -> None:
    # a tag re-check reads the idle GPUs ahead, the first stop policy takes those states and
    # stops them; the second must not act on them from the same (now old) states
    text = TWO_POLICIES.format(tag='"costguard:untagged-since": "{now}"',
                               missing="cost-center") + """\
  - name: idle-gpu-stop-again
    mode: enforce
    filters: {gpu: true}
    condition:
      idle: {below: 5, for: 45m}
    actions:
      - stop: {grace: 0m}
    limits: {max_actions_per_cycle: 10}
"""
    settings = Settings(database_url=db_url, policy_paths=[])
    Engine(settings, db, {"sim": cloud}, parse_policy_text(text, "test.yml"), clock).run_cycle()

    assert cloud.calls["stop"] == 3  # once each, by the first policy
    assert cloud.calls["describe_many"] == 2  # the shared one, and the second policy's own
    with db.session() as s:
        again = list(s.exec(select(ActionJournalRow).where(
            ActionJournalRow.policy == "idle-gpu-stop-again",
            ActionJournalRow.action == "stop")))
    assert again and all(j.status == "skipped" for j in again)


def test_a_stop_candidate_that_cannot_be_read_does_not_hold_up_the_tags(
    clock: ManualClock, db: Database, db_url: str
) -> None:
    class Unreadable(BatchCloud):
        def describe_many(self, instances: Sequence[Instance]) -> dict[str, Instance | None]:
            if any(i.instance_id == "i-idle0" for i in instances):
                self.calls["describe_many"] += 1
                raise ProviderError("sim", "111111111111/us-east-1", "throttled")
            return super().describe_many(instances)

    cloud = Unreadable(clock)
    cloud.add("i-idle0", always("no_process"))
    cloud.add("i-untagged", always("busy"))
    _mark_all_but(cloud, "cost-center", "i-untagged")
    _engine(db, cloud, clock, db_url).run_cycle()

    # the tag re-check read i-idle0 along and failed; the tag went ahead on its own read
    assert cloud.calls["tags"] == 1
    assert "costguard:untagged-since" in cloud.instances["i-untagged"].tags
    assert cloud.calls["stop"] == 0  # the stop could not re-check i-idle0 either


def test_a_runner_driven_without_run_has_its_rechecks(db: Database, cloud: BatchCloud) -> None:
    # the terminate path drives AfterStop on a fresh runner (tests/providers/aws/
    # test_aws_terminate.py); everything the parts touch must exist before any run
    runner = ActionRunner(db, {"sim": cloud}, Attributor())
    assert len(runner.rechecks) == 0 and runner.rechecks.max_age == 60
    runner.rechecks.clear()


def test_a_scale_in_between_the_tags_and_the_stop_makes_the_stop_read_anew(
    clock: ManualClock, db: Database, db_url: str
) -> None:
    # tags (reading the idle pet ahead), then a policy that scales in an idle member, then
    # the stop: what the tag re-check read is from before the group changed, so it is not
    # taken (starts, terminations and resizes forget it the same way)
    cloud = BatchCloud(clock)
    cloud.add("i-idle0", always("no_process"))
    cloud.add_group("asg-a", desired=2, min_size=0)
    for n in range(2):
        cloud.add(f"i-m{n}", always("no_process"),
                  owner=Owner(kind=OwnerKind.ASG, name="asg-a", via="test"))
    text = TWO_POLICIES.format(tag='"costguard:untagged-since": "{now}"', missing="cost-center")
    scale_in = """\
  - name: idle-members
    mode: enforce
    filters: {gpu: true, state: running, managed: true}
    condition:
      idle: {below: 5, for: 45m}
    actions:
      - scale_in: {grace: 0m}
    limits: {max_actions_per_cycle: 10}
"""
    head, stop = text.split("  - name: idle-gpu-stop\n")
    text = head + scale_in + "  - name: idle-gpu-stop\n" + stop
    settings = Settings(database_url=db_url, policy_paths=[])
    Engine(settings, db, {"sim": cloud}, parse_policy_text(text, "test.yml"), clock).run_cycle()

    assert cloud.calls["scale_in"] >= 1 and cloud.calls["stop"] == 1
    assert cloud.calls["describe_many"] == 2  # the tags', and the stop's own after the resize


def test_a_reuse_past_five_minutes_is_refused_by_the_setting() -> None:
    # a state read longer ago than that is no re-check before acting (1e9 was accepted)
    from pydantic import ValidationError

    assert SafetySettings(recheck_reuse_seconds=300).recheck_reuse_seconds == 300
    for bad in (300.5, 1e9, float("inf")):
        with pytest.raises(ValidationError, match="less than or equal to 300"):
            SafetySettings(recheck_reuse_seconds=bad)
