"""record_inventory writes with Core statements: every column ends as the ORM upsert left it,
unchanged rows only move `last_seen`, and ORM copies in the session are not left stale."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlmodel import select

from costguard.model import Instance, InstanceState, Lifecycle
from costguard.store.db import Database
from costguard.store.inventory import current_instances, record_inventory
from costguard.store.tables import AccountRow, InstanceRow

T0 = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)
T2 = T0 + timedelta(minutes=10)
T3 = T0 + timedelta(minutes=15)


def _inst(iid: str, **kw: Any) -> Instance:
    base: dict[str, Any] = dict(
        provider="aws", account="1", region="us-east-1", zone="us-east-1a", instance_id=iid,
        name=f"n-{iid}", instance_type="p4d.24xlarge", state=InstanceState.RUNNING,
        lifecycle=Lifecycle.ON_DEMAND, gpu_count=8, gpu_model="NVIDIA A100",
        gpu_memory_mib=40960, launch_time=T0 - timedelta(days=2),
        tags={"team": "research", "Name": f"n-{iid}"}, observed_at=T0, launched_by=None)
    base.update(kw)
    return Instance(**base)


def _rows(db: Database) -> dict[str, dict[str, Any]]:
    with db.session() as s:
        return {r.instance_id: r.model_dump() for r in s.exec(select(InstanceRow))}


def test_new_rows_have_every_column(db_url: str) -> None:
    db = Database(db_url)
    with db.session() as s:
        assert record_inventory(s, "aws", [_inst("i-1"), _inst("i-2", zone=None, tags={})],
                                T0, complete=True) == []
    rows = _rows(db)
    assert rows["i-1"] == {
        "provider": "aws", "instance_id": "i-1", "account": "1", "region": "us-east-1",
        "zone": "us-east-1a", "name": "n-i-1", "instance_type": "p4d.24xlarge",
        "state": "running", "state_reason": None, "lifecycle": "on-demand", "gpu_count": 8,
        "gpu_model": "NVIDIA A100", "gpu_memory_mib": 40960,
        "launch_time": T0 - timedelta(days=2), "tags": {"team": "research", "Name": "n-i-1"},
        "first_seen": T0, "last_seen": T0, "state_changed_at": T0, "accrued_until": T0,
        "owner": None,
        "accrue_state": "running", "gone": False, "launched_by": None, "kind": "instance",
    }
    assert rows["i-2"]["zone"] is None and rows["i-2"]["tags"] == {}
    with db.session() as s:
        acc = s.get(AccountRow, ("aws", "1"))
        assert acc is not None and acc.first_seen == acc.last_seen == T0
    db.dispose()


def test_unchanged_rows_move_last_seen_only_and_changed_rows_take_the_listing(
    db_url: str,
) -> None:
    db = Database(db_url)
    with db.session() as s:
        record_inventory(s, "aws", [_inst("i-1"), _inst("i-2"), _inst("i-3")], T0,
                         complete=True)
    with db.session() as s:  # accrual moved its watermark meanwhile: kept
        row = s.get(InstanceRow, ("aws", "i-1"))
        assert row is not None
        row.accrued_until = T1
        s.add(row)
    retagged = _inst("i-2", tags={"team": "vision"}, launched_by="arn:x", gpu_count=4)
    stopped = _inst("i-3", state=InstanceState.STOPPED, state_reason="Client.UserInitiated")
    with db.session() as s:
        changes = record_inventory(s, "aws", [_inst("i-1"), retagged, stopped], T1,
                                   complete=True)
    assert [(i.instance_id, prev) for i, prev in changes] == [("i-3", "running")]
    with db.session() as s:
        assert s.get(AccountRow, ("aws", "1")).last_seen == T1  # type: ignore[union-attr]
    rows = _rows(db)
    assert rows["i-1"]["last_seen"] == T1 and rows["i-1"]["accrued_until"] == T1
    assert rows["i-1"]["state_changed_at"] == T0 and rows["i-1"]["first_seen"] == T0
    assert rows["i-2"]["tags"] == {"team": "vision"} and rows["i-2"]["launched_by"] == "arn:x"
    assert rows["i-2"]["gpu_count"] == 4 and rows["i-2"]["state_changed_at"] == T0
    assert rows["i-2"]["last_seen"] == T1
    assert rows["i-3"]["state"] == "stopped" and rows["i-3"]["state_changed_at"] == T1
    assert rows["i-3"]["state_reason"] == "Client.UserInitiated"
    assert rows["i-3"]["accrue_state"] == "running"  # accrual's, not the listing's
    db.dispose()


def test_gone_rows_are_marked_once_and_come_back_as_a_change(db_url: str) -> None:
    db = Database(db_url)
    with db.session() as s:
        record_inventory(s, "aws", [_inst("i-1"), _inst("i-2")], T0, complete=True)
    with db.session() as s:
        record_inventory(s, "aws", [_inst("i-1")], T1, complete=True)
    with db.session() as s:
        record_inventory(s, "aws", [_inst("i-1")], T2, complete=True)
    rows = _rows(db)
    assert rows["i-2"]["gone"] and rows["i-2"]["state_changed_at"] == T1
    assert rows["i-2"]["last_seen"] == T0
    with db.session() as s:
        assert [i.instance_id for i in current_instances(s)] == ["i-1"]
    with db.session() as s:
        changes = record_inventory(s, "aws", [_inst("i-1"), _inst("i-2")], T3,
                                   complete=False)
    assert [(i.instance_id, prev) for i, prev in changes] == [("i-2", "running")]
    rows = _rows(db)
    assert not rows["i-2"]["gone"] and rows["i-2"]["state_changed_at"] == T3
    db.dispose()


def test_other_providers_rows_are_untouched(db_url: str) -> None:
    db = Database(db_url)
    with db.session() as s:
        record_inventory(s, "aws", [_inst("i-1")], T0, complete=True)
        record_inventory(s, "gcp", [_inst("i-1", provider="gcp")], T0, complete=True)
    with db.session() as s:
        record_inventory(s, "aws", [], T1, complete=True)
    with db.session() as s:
        gcp = s.get(InstanceRow, ("gcp", "i-1"))
        aws = s.get(InstanceRow, ("aws", "i-1"))
        assert gcp is not None and not gcp.gone and gcp.last_seen == T0
        assert aws is not None and aws.gone
    db.dispose()


def test_orm_copies_in_the_session_see_the_write(db_url: str) -> None:
    db = Database(db_url)
    with db.session() as s:
        record_inventory(s, "aws", [_inst("i-1"), _inst("i-2")], T0, complete=True)
    with db.session() as s:
        one = s.get(InstanceRow, ("aws", "i-1"))
        two = s.get(InstanceRow, ("aws", "i-2"))
        assert one is not None and two is not None and one.last_seen == T0
        record_inventory(s, "aws", [_inst("i-1", state=InstanceState.STOPPED)], T1,
                         complete=True)
        assert one.state == "stopped" and one.last_seen == T1
        assert two.gone
    db.dispose()


def test_a_pending_orm_change_is_flushed_before_the_listing_is_compared(db_url: str) -> None:
    db = Database(db_url)
    with db.session() as s:
        s.add(InstanceRow(provider="aws", instance_id="i-1", account="1", region="us-east-1",
                          instance_type="p4d.24xlarge", state="running", lifecycle="on-demand",
                          launch_time=T0 - timedelta(days=2), first_seen=T0, last_seen=T0,
                          state_changed_at=T0, accrued_until=T0))
        changes = record_inventory(s, "aws", [_inst("i-1", state=InstanceState.STOPPED)], T1,
                                   complete=True)
    assert [(i.instance_id, prev) for i, prev in changes] == [("i-1", "running")]
    assert _rows(db)["i-1"]["state"] == "stopped"
    db.dispose()


def test_current_instances_read_what_the_session_holds_in_the_orm_query_order(
    db_url: str,
) -> None:
    db = Database(db_url)
    with db.session() as s:
        record_inventory(s, "aws", [_inst("i-2"), _inst("i-1", tags={"a": "b"})], T0,
                         complete=True)
    with db.session() as s:
        record_inventory(s, "aws", [_inst("i-1", tags={"a": "b"})], T1, complete=True)
    with db.session() as s:
        s.add(InstanceRow(provider="sim", instance_id="s-1", account="1", region="r",
                          instance_type="x", state="stopped", lifecycle="spot",
                          launch_time=T0, first_seen=T0, last_seen=T0,
                          state_changed_at=T0, accrued_until=T0))
        got = current_instances(s)  # the pending row is flushed first, as an ORM query would
        everything = current_instances(s, include_gone=True)
        in_orm_order = [(r.provider, r.instance_id) for r in s.exec(select(InstanceRow))]
    assert [(i.provider, i.instance_id) for i in everything] == in_orm_order
    assert sorted((i.provider, i.instance_id) for i in got) == [("aws", "i-1"), ("sim", "s-1")]
    got.sort(key=lambda i: i.provider)
    assert got[0] == _inst("i-1", tags={"a": "b"}, observed_at=T1)
    assert got[1].state is InstanceState.STOPPED and got[1].lifecycle is Lifecycle.SPOT
    assert got[1].zone is None and got[1].tags == {} and got[1].observed_at == T0
    db.dispose()


def test_values_the_rows_share_are_one_object_in_every_instance(db_url: str) -> None:
    """The inventory lives through the cycle: equal accounts, regions, types, tag keys and
    values and poll times are held once, whatever the driver returned per row."""
    db = Database(db_url)
    with db.session() as s:
        record_inventory(s, "aws", [_inst("i-1"), _inst("i-2"), _inst("i-3", region="eu-west-1")],
                         T0, complete=True)
    with db.session() as s:
        a, b, c = sorted(current_instances(s), key=lambda i: i.instance_id)
    assert (a.account is b.account is c.account and a.region is b.region
            and a.instance_type is b.instance_type and a.gpu_model is b.gpu_model
            and a.observed_at is b.observed_at and a.launch_time is b.launch_time)
    (ka, va), (kb, vb) = sorted(a.tags.items())[1], sorted(b.tags.items())[1]
    assert ka == kb == "team" and ka is kb and va is vb
    assert a.tags is not b.tags and a.tags["Name"] != b.tags["Name"]  # their own dicts
    assert c.region == "eu-west-1" and a == _inst("i-1")
    db.dispose()


def test_an_instance_copied_with_plain_strings_is_stored_like_its_enums(db_url: str) -> None:
    db = Database(db_url)
    # model_copy(update=...) does not validate: a state may arrive as a plain str
    copied = _inst("i-1").model_copy(update={"state": "stopped", "lifecycle": "spot"})
    with db.session() as s:
        record_inventory(s, "aws", [_inst("i-1")], T0, complete=True)
    with db.session() as s:
        changes = record_inventory(s, "aws", [copied], T1, complete=True)
    assert [(i.instance_id, prev) for i, prev in changes] == [("i-1", "running")]
    row = _rows(db)["i-1"]
    assert (row["state"], row["lifecycle"], row["state_changed_at"]) == ("stopped", "spot", T1)
    db.dispose()


def test_an_owner_round_trips_and_a_new_group_size_rewrites_the_row(db_url: str) -> None:
    from costguard.model import Owner, OwnerKind
    from costguard.store.inventory import to_instance

    owner = Owner(kind=OwnerKind.ASG, name="gpu-asg", scope="us-east-1", desired=4,
                  min_size=1, max_size=8, via="tag aws:autoscaling:groupName",
                  tags={"team": "research"})
    db = Database(db_url)
    with db.session() as s:
        record_inventory(s, "aws", [_inst("i-1", owner=owner), _inst("i-2")], T0,
                         complete=True)
    with db.session() as s:
        listed = {i.instance_id: i for i in current_instances(s)}
        assert listed["i-1"].owner == owner and listed["i-2"].owner is None
        assert to_instance(s.get(InstanceRow, ("aws", "i-1"))).owner == owner
    smaller = owner.model_copy(update={"desired": 3})
    with db.session() as s:
        record_inventory(s, "aws", [_inst("i-1", owner=smaller), _inst("i-2")],
                         T0 + timedelta(minutes=5), complete=True)
    with db.session() as s:
        assert {i.instance_id: i.owner for i in current_instances(s)}["i-1"] == smaller
    db.dispose()


def test_a_notebook_keeps_its_kind_through_the_store(db_url: str) -> None:
    """The kind a machine is governed as (a SageMaker notebook instance is a `notebook`)
    comes back from both reads, and a listing that changes it rewrites the row."""
    from costguard.model import InstanceKind
    from costguard.store.inventory import to_instance

    db = Database(db_url)
    with db.session() as s:
        record_inventory(s, "aws", [_inst("nb-1", kind=InstanceKind.NOTEBOOK), _inst("i-2")],
                         T0, complete=True)
    with db.session() as s:
        kinds = {i.instance_id: i.kind for i in current_instances(s)}
        assert kinds == {"nb-1": InstanceKind.NOTEBOOK, "i-2": InstanceKind.INSTANCE}
        assert to_instance(s.get(InstanceRow, ("aws", "nb-1"))).kind is InstanceKind.NOTEBOOK
    with db.session() as s:
        record_inventory(s, "aws", [_inst("nb-1"), _inst("i-2")], T0 + timedelta(minutes=5),
                         complete=True)
    with db.session() as s:
        assert {i.instance_id: i.kind for i in current_instances(s)}["nb-1"] == "instance"
    db.dispose()
