"""The act stage's batched path: the stops and tags of one policy in a few provider calls.

Used for a provider that implements both optional capabilities of `providers.base`
(`Describes.describe_many`, `BatchActions.stop_many / set_tags_many`); the others keep the
runner's one-instance-at-a-time path. The guarantees are the per-instance path's:

- stops: every intent is journaled (one transaction) before any provider call; one
  `describe_many` per (provider, account, region) re-checks them with the same rule as
  `safety.recheck` (`safety.skip_reason`); one `stop_many` per scope stops those that pass;
  then every intent is resolved and every policy state updated exactly as `_stop` does.
  The fault points "after-intent" and "after-call" fire once per batch.
- tags: requests of one policy with identical tags are collected while the policy's session
  is open and sent at its end (`BatchTags.flush`, still inside that session, so a crash rolls
  the whole policy back as before): one `describe_many` (tags on a gone id are skipped, as
  the per-instance path does) and one `set_tags_many` per scope and tag set.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Container, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from sqlmodel import Session, col, select

from costguard.actions import journal
from costguard.actions.bulk import Settled, State, journal_entry, write_intents
from costguard.actions.safety import skip_reason
from costguard.errors import ProviderError
from costguard.model import ActionOutcome, ActionResult, Instance
from costguard.policy.evaluate import Finding
from costguard.policy.schema import Policy
from costguard.providers.base import BatchActions, Describes, tag_detail
from costguard.store.tables import ActionJournalRow

if TYPE_CHECKING:
    from costguard.actions.runner import ActionRunner
    from costguard.actions.stats import ActStats

log = logging.getLogger("costguard.act")

Scope = tuple[str, str, str]  # (provider, account, region or "": see `_scope`)
G = TypeVar("G")
R = TypeVar("R")
_KEYS_PER_QUERY = 500  # bound parameters per IN (...) list
_OWN_TAGS = "costguard:"  # costguard's own tag keys (protect, snooze, untagged-since, ...)


def batch_capable(provider: object) -> bool:
    """Whether the provider re-checks and acts on many instances per call."""
    return isinstance(provider, Describes) and isinstance(provider, BatchActions)


def _scope(inst: Instance, wide: Container[str] = ()) -> Scope:
    """The instance's scope: its account and region, or its account alone where its
    provider is in `wide` (`spanning_regions`)."""
    return (inst.provider, inst.account, "" if inst.provider in wide else inst.region)


def spanning_regions(providers: Mapping[str, object]) -> frozenset[str]:
    """The providers whose calls span an account's regions (`calls_span_regions`: a GCP
    project's filtered aggregatedList reads every zone, and a batch request holds calls to
    any zone). Scoped by region, such a provider would make per region the call that
    covers them all."""
    return frozenset(name for name, p in providers.items()
                     if getattr(p, "calls_span_regions", False))


def _by_scope(instances: Sequence[Instance], wide: Container[str] = ()
              ) -> dict[Scope, list[Instance]]:
    groups: dict[Scope, list[Instance]] = defaultdict(list)
    for inst in instances:
        groups[_scope(inst, wide)].append(inst)
    return groups


def completed_keys(s: Session, keys: Sequence[str]) -> set[str]:
    """The keys among `keys` whose action is already done (journal.completed, batched)."""
    found: set[str] = set()
    for start in range(0, len(keys), _KEYS_PER_QUERY):
        chunk = list(keys[start : start + _KEYS_PER_QUERY])
        found.update(s.exec(select(ActionJournalRow.key).where(
            col(ActionJournalRow.key).in_(chunk),
            col(ActionJournalRow.status).in_(["done", "dry-run"]))))
    return found


def scope_workers(provider: object) -> int:
    """How many scopes' calls may be in flight at once: the provider's `scope_workers` (its
    configured worker count), else one scope at a time."""
    workers = getattr(provider, "scope_workers", 1)
    return max(1, workers) if isinstance(workers, int) else 1


def each_scope(workers: int, groups: Sequence[G], call: Callable[[G], R], *,
               name: str = "costguard-act") -> list[R]:
    """`call` on every group, `workers` at a time (threads named `name`), results in the
    groups' order; an exception is raised once every call has ended. An organisation has
    thousands of (account, region) scopes, each call waits on a cloud API for ~100 ms, and
    one scope's calls do not depend on another's. In the act stage `call` must not touch a
    database session: the stage writes before and after, never in between (the engine's
    collect and telemetry stages run one call per provider here, their writes locked)."""
    if workers <= 1 or len(groups) <= 1:
        return [call(g) for g in groups]
    with ThreadPoolExecutor(min(workers, len(groups)), name) as pool:
        return list(pool.map(call, groups))


def _workers(runner: ActionRunner, groups: Mapping[Any, object]) -> int:
    """The most scopes in flight the groups' providers allow (a group's key starts with
    its provider's name)."""
    return max((scope_workers(runner.providers[str(key[0])]) for key in groups), default=1)


def fresh_states(provider: object, instances: Sequence[Instance],
                 rechecks: Rechecks | None = None
                 ) -> dict[str, Instance | ProviderError | None]:
    """describe_many per scope (scopes concurrently); a scope that cannot be read maps its
    ids to the error. With `rechecks`, what this act stage read less than its `max_age` ago
    is taken from there (a scope whose ids are all there is not described) and what is read
    is kept there."""
    assert isinstance(provider, Describes)
    out: dict[str, Instance | ProviderError | None] = {}
    if rechecks is not None:
        out, instances = rechecks.recent(instances)

    def read(members: list[Instance]) -> dict[str, Instance | ProviderError | None]:
        try:
            got = provider.describe_many(members)
        except ProviderError as exc:
            return dict.fromkeys((i.instance_id for i in members), exc)
        return {i.instance_id: got.get(i.instance_id) for i in members}

    wide = spanning_regions({i.provider: provider for i in instances[:1]})
    scopes = list(_by_scope(instances, wide).values())
    for found in each_scope(scope_workers(provider), scopes, read):
        out |= found
        if rechecks is not None:
            rechecks.keep(instances[0].provider, found)
    return out


def stops_ahead(policies: Sequence[Policy], findings: Sequence[Finding]) -> list[Instance]:
    """The instances a stop may re-check this act stage: those a stop policy's finding
    holds for that no controller owns (a member is scaled in instead, not stopped)."""
    stopping = {p.name for p in policies if p.stop_action is not None}
    return [f.instance for f in findings
            if f.holds and f.policy.name in stopping and f.instance.owner is None]


class Rechecks:
    """The re-checks of one act stage, kept `max_age` seconds (`safety.recheck_reuse_seconds`)
    so that a scope's tag policy and stop policy share one DescribeInstances: the tag path
    re-checks that its instances still exist, and reads with them the scope's instances a
    stop policy may act on later in the stage (`stops_ahead`); the stop path takes those
    states instead of asking again. A state is only kept as fresh as it was read; what
    costguard writes itself is folded in (`tagged`): its own `costguard:` tags (protect and
    snooze included, which the stop re-check weighs) patch the kept state, any other tag
    written forgets it, so the stop path reads that instance anew (a written tag could name
    a controller). A stop sent forgets its instances (a second stop policy reads them anew
    and finds them stopping), and starts, terminations, scale-ins and group resizes forget
    everything. Errors are never kept. Thread-safe: scopes are sent concurrently."""

    def __init__(self, max_age: float, ahead: Sequence[Instance] = (),
                 monotonic: Callable[[], float] = time.monotonic,
                 wide: Container[str] = ()) -> None:
        self.max_age = max_age
        self.wide = wide  # scoped per account (`spanning_regions`)
        self._now = monotonic
        self._lock = threading.Lock()
        self._kept: dict[tuple[str, str], tuple[float, Instance | None]] = {}
        # what a stop later in the stage may re-check, by scope: read along with a tag
        # re-check of the same scope (one call either way, up to describe_many's chunk)
        self._ahead: dict[Scope, list[Instance]] = (_by_scope(ahead, wide) if max_age > 0
                                                     else {})
        # only these are kept: no one after the tag path asks about the others
        self._wanted = {(i.provider, i.instance_id) for i in ahead} if max_age > 0 else set()

    def with_ahead(self, instances: Sequence[Instance]) -> list[Instance]:
        """`instances` and, of their scopes, the ones a stop may re-check later."""
        ids = {i.instance_id for i in instances}
        extra = [i for scope in {_scope(i, self.wide) for i in instances}
                 for i in self._ahead.get(scope, ()) if i.instance_id not in ids]
        return [*instances, *extra]

    def recent(self, instances: Sequence[Instance]
               ) -> tuple[dict[str, Instance | ProviderError | None], list[Instance]]:
        """The kept states of `instances` younger than `max_age`, and the instances that
        must be read."""
        found: dict[str, Instance | ProviderError | None] = {}
        rest: list[Instance] = []
        oldest = self._now() - self.max_age
        with self._lock:
            for inst in instances:
                kept = self._kept.get((inst.provider, inst.instance_id))
                if kept is not None and kept[0] > oldest:
                    found[inst.instance_id] = kept[1]
                else:
                    rest.append(inst)
        return found, rest

    def keep(self, provider: str, states: Mapping[str, Instance | ProviderError | None]
             ) -> None:
        read_at = self._now()
        wanted = self._wanted
        with self._lock:
            for instance_id, state in states.items():
                ref = (provider, instance_id)
                if ref in wanted and not isinstance(state, ProviderError):
                    self._kept[ref] = (read_at, state)

    def forget(self, instances: Sequence[Instance]) -> None:
        with self._lock:
            for inst in instances:
                self._kept.pop((inst.provider, inst.instance_id), None)

    def __len__(self) -> int:
        return len(self._kept)

    def clear(self) -> None:
        """Forget every kept state (an action that changes instances or groups ran)."""
        with self._lock:
            self._kept.clear()

    def tagged(self, instances: Sequence[Instance], tags: Mapping[str, str],
               remove: Sequence[str]) -> None:
        """`tags` were written to (and `remove` taken from) `instances`."""
        own = all(k.startswith(_OWN_TAGS) for k in [*tags, *remove])
        with self._lock:
            for inst in instances:
                ref = (inst.provider, inst.instance_id)
                kept = self._kept.get(ref)
                if kept is None or kept[1] is None:
                    continue
                if not own:
                    del self._kept[ref]
                    continue
                state = kept[1]
                new = {k: v for k, v in state.tags.items() if k not in remove} | dict(tags)
                self._kept[ref] = (kept[0], state.model_copy(update={"tags": new}))


@dataclass
class _Stop:
    f: Finding
    st: State
    intent_id: int
    target: Instance
    why_not: str | None = None
    result: ActionResult | None = None
    error: str | None = None


class BatchStop:
    def __init__(self, runner: ActionRunner) -> None:
        self.r = runner

    def run(self, policy: Policy, due: Sequence[tuple[Finding, State]],
            now: datetime, cycle_id: int | None, stats: ActStats) -> None:
        """Stop the due pairs: batched where the provider can, one by one otherwise."""
        one_by_one = [(f, st) for f, st in due if not self._batched(f.instance)]
        for f, st in one_by_one:
            self.r._stop(policy, f, st, now, cycle_id, stats)
        batched = [(f, st) for f, st in due if self._batched(f.instance)]
        if not batched:
            return
        stops = self._intents(policy, batched, now, cycle_id)
        self.r.fault("after-intent")
        self._recheck(stops, now)
        self._call(stops, dry_run=not policy.is_enforced)
        self.r.fault("after-call")
        self._resolve(policy, stops, now, stats)

    def _batched(self, inst: Instance) -> bool:
        # the batched calls rely on the re-check before them; without it, the provider's
        # own per-instance stop checks the state itself
        return self.r.safety.recheck_before_acting and self.r.batch_capable(inst.provider)

    def _intents(self, policy: Policy, due: Sequence[tuple[Finding, State]],
                 now: datetime, cycle_id: int | None) -> list[_Stop]:
        dry = not policy.is_enforced
        keyed = [(journal.journal_key(policy.name, f.instance, "stop", st.episode), f, st)
                 for f, st in due]
        with self.r.db.session() as s:
            done = completed_keys(s, [k for k, _, _ in keyed])
            todo = [(key, f, st) for key, f, st in keyed if key not in done]
            ids = write_intents(s, [  # one INSERT; the rows journal.write_intent writes
                {**journal_entry(key=key, cycle_id=cycle_id, policy=policy.name,
                                 inst=f.instance, action="stop", dry_run=dry,
                                 status="intent", detail=f.reason,
                                 usd_per_hour=f.usd_per_hour, now=now), "result_at": None}
                for key, f, st in todo])
            return [_Stop(f, st, i, f.instance) for i, (_, f, st) in zip(ids, todo, strict=True)]

    def _recheck(self, stops: list[_Stop], now: datetime) -> None:
        by_provider: dict[str, list[_Stop]] = defaultdict(list)
        for stop in stops:
            by_provider[stop.f.instance.provider].append(stop)
        groups = list(by_provider.values())

        def read(group: list[_Stop]) -> dict[str, Instance | ProviderError | None]:
            provider = self.r.providers[group[0].f.instance.provider]
            return fresh_states(provider, [x.f.instance for x in group], self.r.rechecks)

        # a policy over several clouds re-checks them at once (each its scopes at once)
        for group, fresh in zip(groups, each_scope(len(groups), groups, read,
                                                   name="costguard-recheck"), strict=True):
            for stop in group:
                got = fresh[stop.f.instance.instance_id]
                if isinstance(got, ProviderError):
                    stop.why_not = f"could not re-check the instance: {got}"
                    continue
                stop.why_not = skip_reason(stop.f.instance, got, now)
                stop.target = got or stop.f.instance

    def _call(self, stops: list[_Stop], *, dry_run: bool) -> None:
        groups: dict[Scope, list[_Stop]] = defaultdict(list)
        for stop in stops:
            if stop.why_not is None:
                groups[_scope(stop.target, self.r.wide)].append(stop)
        def send(group: list[_Stop]) -> None:
            provider = self.r.providers[group[0].target.provider]
            assert isinstance(provider, BatchActions)
            if not dry_run:  # stopped, or maybe: what the re-check read is old either way
                self.r.rechecks.forget([x.target for x in group])
            try:
                results = provider.stop_many([x.target for x in group], dry_run=dry_run)
            except ProviderError as exc:
                for stop in group:
                    stop.error = str(exc)
                return
            for stop in group:
                stop.result = results.get(stop.target.instance_id)
                if stop.result is None:
                    stop.error = "the provider returned no result for this instance"

        each_scope(_workers(self.r, groups), list(groups.values()), send)

    def _resolve(self, policy: Policy, stops: list[_Stop], now: datetime,
                 stats: ActStats) -> None:
        # every stop's changes are collected, then written in one transaction with one
        # statement per table (journal results, policy states, instance states, alerts)
        settled = Settled()
        for stop in stops:
            self.r.settle_stop(settled, policy, stop.f, stop.st, stop.intent_id, now, stats,
                               why_not=stop.why_not, result=stop.result, error=stop.error)
        with self.r.db.session() as s:
            settled.write(s)


@dataclass
class _Tag:
    policy: str
    f: Finding
    key: str
    tags: dict[str, str]
    remove: tuple[str, ...]
    dry: bool


class BatchTags:
    """Tag requests collected during one policy's session, sent at its end."""

    def __init__(self, runner: ActionRunner) -> None:
        self.r = runner
        self.pending: list[_Tag] = []

    def add(self, policy: str, f: Finding, key: str, tags: dict[str, str],
            remove: tuple[str, ...], dry: bool) -> None:
        self.pending.append(_Tag(policy, f, key, tags, remove, dry))

    def flush(self, now: datetime, cycle_id: int | None, stats: ActStats) -> None:
        """Send the collected requests; their journal entries go to the runner's `rows`
        (written with the policy's session)."""
        pending, self.pending = self.pending, []
        groups: dict[tuple[object, ...], list[_Tag]] = defaultdict(list)
        for req in pending:
            groups[(*_scope(req.f.instance, self.r.wide), tuple(sorted(req.tags.items())),
                    req.remove,
                    req.dry)].append(req)
        sent = each_scope(_workers(self.r, groups), list(groups.values()), self._send)
        for outcomes in sent:
            for req, status, detail in outcomes:
                self.r.rows.record(key=req.key, cycle_id=cycle_id, policy=req.policy,
                                   inst=req.f.instance, action="tag", dry_run=req.dry,
                                   status=status, detail=detail,
                                   usd_per_hour=req.f.usd_per_hour, now=now)
                (stats.dry_run if req.dry else stats.tagged)[req.policy] += 1

    def _send(self, group: list[_Tag]) -> list[tuple[_Tag, str, str]]:
        first = group[0]
        provider = self.r.providers[first.f.instance.provider]
        assert isinstance(provider, BatchActions)
        rechecks = self.r.rechecks
        own = [r.f.instance for r in group]
        wider = rechecks.with_ahead(own)
        fresh = fresh_states(provider, wider, rechecks)
        if len(wider) > len(own) and any(
                isinstance(fresh[i.instance_id], ProviderError) for i in own):
            # what was read along for a stop failed the read: the tags need their own only
            fresh = fresh_states(provider, own)
        out: list[tuple[_Tag, str, str]] = []
        alive: list[_Tag] = []
        for req in group:
            got = fresh[req.f.instance.instance_id]
            if isinstance(got, ProviderError):
                out.append((req, "failed", f"cannot re-check: {got}"))
            elif got is None:
                out.append((req, "skipped", f"{req.f.instance.instance_id} no longer exists"))
            else:
                alive.append(req)
        if not alive:
            return out
        try:
            results = provider.set_tags_many([r.f.instance for r in alive], first.tags,
                                             remove=first.remove, dry_run=first.dry)
        except ProviderError as exc:
            return out + [(req, "failed", str(exc)) for req in alive]
        if not first.dry:
            rechecks.tagged(
                [r.f.instance for r in alive if (res := results.get(r.f.instance.instance_id))
                 is not None and res.outcome is ActionOutcome.DONE], first.tags, first.remove)
        for req in alive:
            result = results.get(req.f.instance.instance_id)
            if result is None:
                out.append((req, "failed", "the provider returned no result for this instance"))
            else:
                out.append((req, str(result.outcome),
                            result.detail or tag_detail(req.tags, req.remove)))
        return out
