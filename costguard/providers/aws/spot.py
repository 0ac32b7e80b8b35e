"""Spot prices per (account, region), read at most once an hour per instance type.

Spot prices move slowly (AWS changes them gradually, not per minute): what was read less than
SPOT_PRICE_TTL ago serves the cycles in between, and is kept in the store (`notes` /
`restore`) so a restart within the hour does not ask again. Each scope's prices are read in
the inventory's worker for that scope (`prefetch`), for the types of its spot instances
(their cost) and of its running ones (a finding's alert says what spot would save): asked
later, from accrual or the act stage, scope after scope, each read would wait its turn. A
type asked for outside that (a stopped on-demand instance priced as spot) is read then,
alone (`lookup`). A failed read is stored as already old, so the next cycle asks again; the
on-demand price stands in meanwhile as an upper bound (the provider's `price`).
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from costguard.clock import Clock, utc
from costguard.errors import ProviderError
from costguard.model import Instance, InstanceState, Lifecycle
from costguard.providers.aws.pricing import latest_spot_prices

SPOT_PRICE_TTL = timedelta(hours=1)  # a spot type's prices are read at most once an hour
log = logging.getLogger(__name__)

Scope = tuple[str, str]  # (account, region)


class SpotPrices:
    """Thread-safe: scopes are read concurrently."""

    def __init__(self, product: str, clock: Clock,
                 ec2_for: Callable[[str, str], Any]) -> None:
        self._product = product
        self._clock = clock
        self._ec2_for = ec2_for  # (account id, region) -> the scope's EC2 client
        self._lock = threading.Lock()
        # type -> zone -> USD/h: a type's prices are looked up (every priced instance) and
        # written to the store (every inventory) by type, never scanned for it
        self._usd: dict[Scope, dict[str, dict[str, float]]] = {}
        self._asked: dict[Scope, dict[str, datetime]] = defaultdict(dict)  # type -> when read

    def forget_old(self, now: datetime) -> None:
        """Drop what was read SPOT_PRICE_TTL ago or earlier: it is asked for again."""
        with self._lock:
            for key, asked in self._asked.items():
                old = {t for t, at in asked.items() if now - at >= SPOT_PRICE_TTL}
                by_type = self._usd.get(key, {})
                for t in old:
                    del asked[t]
                    by_type.pop(t, None)

    def prefetch(self, account_id: str, region: str, instances: Sequence[Instance],
                 now: datetime) -> None:
        """One call for the scope's types not read within the hour (see the module)."""
        types = {i.instance_type for i in instances
                 if i.state is InstanceState.RUNNING or i.lifecycle is Lifecycle.SPOT}
        with self._lock:
            types -= set(self._asked[(account_id, region)])
        if types:
            self._read(account_id, region, types, now)

    def lookup(self, instance: Instance) -> float | None:
        """The instance type's current spot price in its zone (the dearest zone where the
        zone is unknown, so cost is not understated); None when there is none."""
        key = (instance.account, instance.region)
        with self._lock:
            asked = instance.instance_type in self._asked[key]
        if not asked:
            self._read(instance.account, instance.region, {instance.instance_type},
                       self._clock.now())
        with self._lock:  # the dict is written under the lock by other scopes' reads
            by_az = self._usd.get(key, {}).get(instance.instance_type, {})
            if not by_az:
                return None
            if instance.zone in by_az:
                return by_az[instance.zone]
            return max(by_az.values())

    def _read(self, account_id: str, region: str, types: set[str], now: datetime) -> None:
        key = (account_id, region)
        try:
            fetched = latest_spot_prices(self._ec2_for(account_id, region), sorted(types),
                                         self._product, now,
                                         f"{account_id}/{region}/spot-prices")
        except ProviderError as exc:
            log.warning("spot prices not read: %s", exc)
            fetched, failed = {}, True
        else:
            failed = False
        with self._lock:
            # not asked again this cycle either way; a failed read is already old, so the
            # next cycle asks again
            at = now - SPOT_PRICE_TTL if failed else now
            self._asked[key].update(dict.fromkeys(types, at))
            self._keep(key, fetched)

    def _keep(self, key: Scope, prices: dict[tuple[str, str], float]) -> None:
        """`prices` ((type, zone) -> USD/h) into the scope's; the caller holds the lock."""
        by_type = self._usd.setdefault(key, {})
        for (itype, az), usd in prices.items():
            by_type.setdefault(itype, {})[az] = usd

    def notes(self) -> dict[str, dict[str, Any]]:
        """Prices still fresh, per "account/region" and type: when read, by zone."""
        now = self._clock.now()
        notes: dict[str, dict[str, Any]] = {}
        with self._lock:
            for (account, region), asked in self._asked.items():
                prices = self._usd.get((account, region), {})
                for itype, at in asked.items():
                    if now - at >= SPOT_PRICE_TTL:
                        continue  # a failed read is stored as already old: not worth keeping
                    notes.setdefault(f"{account}/{region}", {})[itype] = {
                        "at": at.isoformat(),
                        "usd": dict(sorted(prices.get(itype, {}).items()))}
        return notes

    def restore(self, notes: dict[str, Any]) -> None:
        """What `notes` kept, where still fresh; a damaged entry is asked for again."""
        now = self._clock.now()
        for scope, types in notes.items():
            account, _, region = str(scope).partition("/")
            if not isinstance(types, dict):
                continue
            for itype, note in types.items():
                try:
                    at = utc(datetime.fromisoformat(note["at"]))
                    usd = {str(az): float(v) for az, v in note["usd"].items()}
                except (KeyError, TypeError, ValueError, AttributeError):
                    continue
                if not timedelta(0) <= now - at < SPOT_PRICE_TTL:
                    continue  # too old, or from a clock ahead of ours
                with self._lock:
                    self._asked[(account, region)][str(itype)] = at
                    self._keep((account, region), {(str(itype), az): v
                                                   for az, v in usd.items()})
