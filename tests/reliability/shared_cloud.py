"""A simulated cloud that several processes share, as replicas share a real cloud.

Each replica builds the same seeded `SimProvider` fleet in memory; instance states live in a
JSON file guarded by `flock`, so a stop made by one process is seen by every other one, and
the file counts every real stop transition (the ground truth a test compares the action
journal with). With `restart_after_minutes` set in the file, owners start a stopped instance
again that long after its stop, so new idle episodes (and new stops) keep coming.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from costguard.clock import Clock
from costguard.demo.sim import SimProvider
from costguard.model import (
    ActionOutcome,
    ActionResult,
    GpuMinute,
    Instance,
    InstanceState,
    Inventory,
    PriceQuote,
    ProviderName,
)


class SharedState:
    def __init__(self, path: Path) -> None:
        self.path = path

    @contextmanager
    def locked(self) -> Iterator[dict[str, Any]]:
        """The state, under an exclusive lock (a lock file beside it), written back if changed.

        Written whole to a temporary file and renamed over the state: a process SIGKILLed
        while writing leaves the previous state, never an empty or half-written one (the
        real cloud does not forget its instances when a client dies)."""
        with self.path.with_name(self.path.name + ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            raw = self.path.read_text() if self.path.exists() else ""
            state: dict[str, Any] = json.loads(raw) if raw else {}
            state.setdefault("states", {})
            state.setdefault("stops", {})
            before = json.dumps(state, sort_keys=True)
            yield state
            after = json.dumps(state, sort_keys=True)
            if after != before:
                tmp = self.path.with_name(self.path.name + ".tmp")
                tmp.write_text(after)
                os.replace(tmp, self.path)

    def read(self) -> dict[str, Any]:
        with self.locked() as state:
            copy: dict[str, Any] = json.loads(json.dumps(state))
            return copy


class SharedSimCloud:
    name: ProviderName = "sim"

    def __init__(self, inner: SimProvider, state: SharedState, clock: Clock) -> None:
        self.inner = inner
        self.state = state
        self.clock = clock

    def list_instances(self) -> Inventory:
        inv = self.inner.list_instances()
        now = self.clock.now()
        with self.state.locked() as st:
            after = st.get("restart_after_minutes")
            if after is not None:
                for iid, when in list(st.setdefault("stopped_at", {}).items()):
                    if st["states"].get(iid) == "stopped" and \
                            (now - datetime.fromisoformat(when)).total_seconds() >= after * 60:
                        st["states"][iid] = "running"  # the owner needs it again
                        del st["stopped_at"][iid]
            states = dict(st["states"])
        # the shared file is the cloud's truth: the inner fleet only gives identities
        return Inventory(gaps=inv.gaps, instances=[
            i.model_copy(update={"state": InstanceState(states.get(i.instance_id, "running")),
                                 "state_reason": None})
            for i in inv.instances])

    def gpu_metrics(self, instances: Sequence[Instance], start: datetime, end: datetime
                    ) -> list[GpuMinute]:
        return self.inner.gpu_metrics(instances, start, end)

    def _move(self, inst: Instance, frm: str, to: str, verb: str, dry_run: bool
              ) -> ActionResult:
        with self.state.locked() as st:
            now = st["states"].get(inst.instance_id, "running")
            if now != frm:
                return ActionResult(outcome=ActionOutcome.SKIPPED, detail=f"is {now}",
                                    state_after=InstanceState(now))
            if dry_run:
                return ActionResult(outcome=ActionOutcome.DRY_RUN, detail=f"would {verb}")
            st["states"][inst.instance_id] = to
            if verb == "stop":
                st["stops"][inst.instance_id] = st["stops"].get(inst.instance_id, 0) + 1
                st.setdefault("stopped_at", {})[inst.instance_id] = \
                    self.clock.now().isoformat()
        return ActionResult(outcome=ActionOutcome.DONE, state_after=InstanceState(to))

    def stop(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        return self._move(instance, "running", "stopped", "stop", dry_run)

    def start(self, instance: Instance, *, dry_run: bool) -> ActionResult:
        return self._move(instance, "stopped", "running", "start", dry_run)

    def set_tags(self, instance: Instance, tags: Mapping[str, str], *,
                 remove: Sequence[str] = (), dry_run: bool) -> ActionResult:
        return self.inner.set_tags(instance, tags, remove=remove, dry_run=dry_run)

    def price(self, instance: Instance) -> PriceQuote | None:
        return self.inner.price(instance)
