"""Providers' notebooks in the store (`costguard.providers.base.Memory`): one control row
per (provider, name), the value as JSON."""

from __future__ import annotations

import json
import logging
from typing import Any

from costguard.clock import Clock
from costguard.store import control
from costguard.store.db import Database

log = logging.getLogger(__name__)


class StoreMemory:
    def __init__(self, db: Database, provider: str, clock: Clock) -> None:
        self.db, self.clock = db, clock
        self.prefix = f"memory:{provider}:"

    def get(self, name: str) -> Any | None:
        """The value last put, or None: never written, or not JSON (a damaged row is
        forgotten, so the provider asks the cloud again, rather than failing every cycle)."""
        with self.db.session() as s:
            raw = control.get(s, self.prefix + name)
        if raw is None:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            log.warning("stored %s%s is not JSON: ignored, asked for again", self.prefix, name)
            return None

    def put(self, name: str, value: Any) -> None:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"))
        with self.db.session() as s:
            control.put(s, self.prefix + name, text, self.clock.now())
