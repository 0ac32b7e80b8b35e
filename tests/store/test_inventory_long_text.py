"""Free text a listing carries (a Kubernetes workload's name, namespace/kind/name, reaches
330 characters) is kept to what its column holds: PostgreSQL refused the row, and with it
the whole inventory's write, every cycle. Both stores; a second listing of the same
instance changes nothing."""

from __future__ import annotations

from datetime import timedelta

from costguard.store.db import Database
from costguard.store.inventory import current_instances, record_inventory
from tests.costs.fleet import T0, instance

NAME = "ml-research/Deployment/" + "x" * 253  # a namespace, a kind, a 253-character name


def test_long_listed_text_is_kept_to_its_columns(db: Database) -> None:
    long = instance("i-long", "m5.large").model_copy(update={
        "name": NAME, "state_reason": "r" * 300, "launched_by": "arn:" + "p" * 600})
    with db.session() as s:
        record_inventory(s, "sim", [long, instance("i-2", "m5.large")], T0, complete=True)
    with db.session() as s:
        again = record_inventory(s, "sim", [long, instance("i-2", "m5.large")],
                                 T0 + timedelta(minutes=5), complete=True)
    assert not again  # the same listing again: written, and no state change
    with db.session() as s:
        stored = {i.instance_id: i for i in current_instances(s)}
    got = stored["i-long"]
    assert got.name == NAME[:256] and len(got.state_reason or "") == 256
    assert got.launched_by == ("arn:" + "p" * 600)[:512]
