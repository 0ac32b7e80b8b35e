"""Providers' notebooks in the store (`costguard.providers.base.Memory`): one control row
per (provider, name), the value as JSON."""

from __future__ import annotations

import json
from typing import Any

from costguard.clock import Clock
from costguard.store import control
from costguard.store.db import Database


class StoreMemory:
    def __init__(self, db: Database, provider: str, clock: Clock) -> None:
        self.db, self.clock = db, clock
        self.prefix = f"memory:{provider}:"

    def get(self, name: str) -> Any | None:
        with self.db.session() as s:
            raw = control.get(s, self.prefix + name)
        return None if raw is None else json.loads(raw)

    def put(self, name: str, value: Any) -> None:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"))
        with self.db.session() as s:
            control.put(s, self.prefix + name, text, self.clock.now())
