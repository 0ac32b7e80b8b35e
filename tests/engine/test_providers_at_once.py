"""Each provider's inventory and metrics are read beside the others': an organisation on
AWS and GCP waits on both clouds at once, not one after the other."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest
from sqlmodel import select

from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.engine import Engine
from costguard.model import GpuMinute, Instance, Inventory, ProviderName
from costguard.policy.load import parse_policy_text
from costguard.store.db import Database
from costguard.store.tables import InstanceRow
from tests.engine.conftest import IDLE_POLICY
from tests.fakes.cloud import IDLE, T0, ScriptedCloud

MEET_S = 5.0  # one provider waits this long for the other's call to start at the same time


class _Cloud(ScriptedCloud):
    """A scripted cloud under another provider's name whose calls wait at `meet` for the
    other cloud's same call: read one after the other, the first call times out."""

    def __init__(self, clock: ManualClock, name: ProviderName, meet: threading.Barrier
                 ) -> None:
        super().__init__(clock)
        self.name = name
        self.meet = meet
        self.met: list[str] = []
        self.asked: list[int] = []  # instances per metrics call

    def add_named(self, iid: str, region: str) -> None:
        inst = self.add(iid, IDLE)  # each in a scope of its own: a chunk never splits one
        self.instances[iid] = inst.model_copy(update={"provider": self.name, "region": region})

    def _together(self, call: str) -> None:
        self.meet.wait(timeout=MEET_S)  # BrokenBarrierError when the other never came
        self.met.append(call)

    def list_instances(self) -> Inventory:
        self._together("list")
        return super().list_instances()

    def gpu_metrics(self, instances: Sequence[Instance], start: datetime, end: datetime
                    ) -> list[GpuMinute]:
        self._together("metrics")
        self.asked.append(len(instances))
        return [m.model_copy(update={"provider": self.name})
                for m in super().gpu_metrics(instances, start, end)]


def test_providers_are_listed_and_read_at_the_same_time(
    db: Database, db_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a 5-minute cycle's chunk: 2 instances for a provider read alone, 1 for each of two
    # read at once (what a chunk holds is shared, as memory is)
    monkeypatch.setattr("costguard.engine.fetch.TELEMETRY_CHUNK", 10)  # instance-minutes
    monkeypatch.setattr("costguard.engine.fetch.TELEMETRY_CHUNK_MIN", 1)
    clock = ManualClock(T0)
    meet = threading.Barrier(2)
    clouds = {name: _Cloud(clock, name, meet) for name in ("aws", "gcp")}
    for name, cloud in clouds.items():
        cloud.add_named(f"{name}-1", "us-east-1")
        cloud.add_named(f"{name}-2", "us-west-2")
    engine = Engine(Settings(database_url=db_url, policy_paths=[]), db, dict(clouds),
                    parse_policy_text(IDLE_POLICY.format(mode="dry-run", cap=10), "t.yml"),
                    clock)
    first = engine.run_cycle()
    clock.advance(timedelta(minutes=5))
    for cloud in clouds.values():
        cloud.asked.clear()
    second = engine.run_cycle()
    for cloud in clouds.values():
        # each call met the other cloud's: neither waited for the other to finish
        assert cloud.met[0] == "list" and "metrics" in cloud.met
        assert cloud.met.count("list") == 2
        assert cloud.asked == [1, 1]  # the second cycle's 5 minutes, the chunk shared
    assert first.instances == second.instances == {"aws": 2, "gcp": 2}
    assert second.readings > 0 and not second.gaps
    with db.session() as s:
        assert sorted(r.instance_id for r in s.exec(select(InstanceRow))) == [
            "aws-1", "aws-2", "gcp-1", "gcp-2"]
    # both providers' readings reached the window, one at a time
    assert {ref[0] for ref in engine.window._by_ref} == {"aws", "gcp"}
