"""`report --by owner`, `owner-kind` and `managed`: spend and idle spend per Auto Scaling
group or node pool, from the same per-instance figures as `--by instance`."""

from __future__ import annotations

from datetime import timedelta

import pytest

from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.engine import Engine
from costguard.model import InstanceKind, Owner, OwnerKind
from costguard.policy.load import parse_policy_text
from costguard.report.queries import spend
from costguard.store.db import Database
from tests.fakes.cloud import BUSY, IDLE, T0, full_cloud
from tests.fakes.scenario import run_for

NOTIFY_ONLY = """\
policies:
  - name: note
    condition: {missing_tags: [nothing-has-this]}
    actions: [notify]
"""


@pytest.fixture(scope="module")
def db() -> Database:
    cloud = full_cloud(ManualClock(T0))
    asg = Owner(kind=OwnerKind.ASG, name="infer", via="test")
    pool = Owner(kind=OwnerKind.GKE, name="gpu-pool", cluster="ml", via="test")
    for i in range(3):
        cloud.add(f"a-{i}", IDLE, owner=asg)
    cloud.add("p-0", IDLE, owner=pool)
    cloud.add("p-1", BUSY, owner=pool)
    cloud.add("pet", BUSY)
    cloud.add("nb", IDLE, kind=InstanceKind.NOTEBOOK)
    engine = Engine(Settings(), Database("sqlite://"), {"sim": cloud},
                    parse_policy_text(NOTIFY_ONLY), cloud.clock,
                    alert_printer=lambda kind, subject, body: None)
    run_for(engine, cloud.clock, timedelta(hours=3), step=timedelta(minutes=10))
    return engine.db


def _by(db: Database, by: list[str], filters: dict[str, str] | None = None
        ) -> dict[tuple[str, ...], tuple[int, int, int]]:
    with db.session() as s:
        report = spend(s, by, T0, T0 + timedelta(hours=4), filters)
    return {r.key: (r.cost_micros, r.idle_cost_micros, r.instances) for r in report.rows}


def test_spend_by_owner_adds_up_to_spend_by_instance(db: Database) -> None:
    owners = _by(db, ["owner"])
    instances = _by(db, ["instance"])
    assert set(owners) == {("asg:infer",), ("gke:gpu-pool",), ("unmanaged",)}
    assert owners[("asg:infer",)][0] == sum(instances[(f"a-{i}",)][0] for i in range(3))
    assert owners[("asg:infer",)][2] == 3 and owners[("gke:gpu-pool",)][2] == 2
    assert sum(v[0] for v in owners.values()) == sum(v[0] for v in instances.values())


def test_idle_cost_per_node_group_shows_which_wastes_most(db: Database) -> None:
    owners = _by(db, ["owner"], {"managed": "true"})
    assert set(owners) == {("asg:infer",), ("gke:gpu-pool",)}
    asg_idle, pool_idle = owners[("asg:infer",)][1], owners[("gke:gpu-pool",)][1]
    assert asg_idle > pool_idle > 0  # three idle members vs one of two


def test_owner_filters_and_groupings(db: Database) -> None:
    assert set(_by(db, ["owner-kind"])) == {("asg",), ("gke",), ("unmanaged",)}
    assert set(_by(db, ["instance"], {"managed": "false"})) == {("pet",), ("nb",)}
    assert set(_by(db, ["owner"], {"owner-kind": "gke,mig"})) == {("gke:gpu-pool",)}
    assert set(_by(db, ["team", "managed"])) == {("research", "true"), ("research", "false")}


def test_spend_by_kind_sets_notebooks_apart(db: Database) -> None:
    kinds = _by(db, ["kind"])
    instances = _by(db, ["instance"])
    assert set(kinds) == {("instance",), ("notebook",)}
    assert kinds[("notebook",)] == instances[("nb",)]  # its cost, idle cost, one instance
    assert kinds[("notebook",)][1] > 0  # idle spend
    assert set(_by(db, ["instance"], {"kind": "notebook"})) == {("nb",)}
    assert sum(v[0] for v in kinds.values()) == sum(v[0] for v in instances.values())


def test_compare_billed_refuses_owner_dimensions(db: Database) -> None:
    with db.session() as s, pytest.raises(ValueError, match="bills do not name the owner"):
        spend(s, ["owner"], T0, T0 + timedelta(hours=4), compare="billed")


def test_spend_of_some_instances_is_theirs_as_in_the_whole_report(db: Database) -> None:
    """`instance_ids` (the stored-verdict refresh asks for the due instances' spend only)
    gives the same figures as the whole report's rows for them, and no others."""
    from costguard.recommend.run import spend_by_instance

    since, until = T0, T0 + timedelta(hours=4)
    with db.session() as s:
        every, teams = spend_by_instance(s, since, until)
        some, some_teams = spend_by_instance(s, since, until, instance_ids=["a-1", "pet"])
        none, _ = spend_by_instance(s, since, until, instance_ids=[])
        owners = spend(s, ["owner"], since, until, instance_ids=["a-0", "a-2"]).rows
        with pytest.raises(ValueError, match="no instance_ids"):
            spend(s, ["team"], since, until, instance_ids=["a-1"], compare="billed")
    assert len(every) == 7 and every["a-1"] > 0 and every["pet"] > 0
    assert some == {"a-1": every["a-1"], "pet": every["pet"]}
    assert some_teams == {"a-1": teams["a-1"], "pet": teams["pet"]}
    assert none == {}
    assert [(r.key, r.instances) for r in owners] == [(("asg:infer",), 2)]
    assert owners[0].cost_micros == round((every["a-0"] + every["a-2"]) * 1e6)


def test_a_notebook_idle_over_the_last_day_is_paid_for_not_running(db: Database) -> None:
    """The report's "paid for, not running" section has the idle notebook: its idle spend of
    the last day as a month's, the share of its hours it sat idle; no busy instance."""
    from costguard.model import HOURS_PER_MONTH
    from costguard.standing.report import paid_not_running

    until = T0 + timedelta(hours=4)
    with db.session() as s:
        lines = [line for line in paid_not_running(s, until) if line.kind == "notebook"]
        idle = spend(s, ["instance"], until - timedelta(days=1), until).rows
    (line,) = lines
    nb = next(r for r in idle if r.key == ("nb",))
    assert (line.team, line.count, line.unpriced) == ("research", 1, 0)
    assert line.usd_per_month == pytest.approx(nb.idle_cost_micros / 1e6 * HOURS_PER_MONTH / 24)
    assert line.idle_share == pytest.approx(nb.idle_gpu_seconds / nb.gpu_seconds)
    assert line.unused_for.startswith("idle up to") and line.as_json()["idle_share"] > 0.5
