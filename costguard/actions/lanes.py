"""The act stage's lanes: policies of different clouds act side by side.

The stage runs its policies in the order the policy files give them. A policy that acts on
AWS only and one that acts on Compute Engine only share no instance, no provider client and
no policy state, and most of their time is spent waiting on their own cloud's API (the
re-checks, stops and tag writes of hundreds of scopes). `lanes` splits the policies into
groups whose providers do not overlap (a policy without `providers` acts on every one, so it
joins them all into one lane); each lane runs its policies one after another, in file order,
and the lanes run at once, each in a thread of its own. With one lane (one cloud, or any
policy spanning both) the stage runs in the caller's thread exactly as before.

What a sequential run promised still holds:
- **The cycle's budget is taken in policy order.** `safety.max_actions_per_cycle` and
  `max_usd_per_hour_per_cycle` are shared by all policies, first come first served. A
  policy's take waits (`Turnstile`) until every policy before it can take no more, so which
  policies a tight budget reaches never depends on which cloud answered faster; the stops
  each take allows then run side by side.
- **The store sees one transaction at a time.** SQLite has a single writer, and a
  transaction that waited on another lane's could fail; a lane's sessions therefore run one
  at a time across lanes (`OneAtATime`), while its calls to the cloud run freely.
- **An error stops the stage.** A lane that raises stops the other lanes before their next
  policy or take; the stage then raises the error of the earliest policy that failed, as a
  sequential run would have raised it first. A policy already acting in another lane
  finishes, journaled as always; what the failed one journaled as an intent is reconciled
  by the next cycle, as after any crash.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Protocol

from sqlmodel import Session

from costguard.actions.batch import BatchTags
from costguard.actions.safety import Budget, CapVerdict
from costguard.actions.stats import ActStats
from costguard.policy.schema import Policy

if TYPE_CHECKING:
    from costguard.actions.runner import ActionRunner


class Store(Protocol):
    """What the act stage needs of the store: transactions (`Database` is one)."""

    def session(self) -> AbstractContextManager[Session]: ...


def lanes(policies: Sequence[Policy]) -> list[list[int]]:
    """The policies' indexes grouped into lanes: two policies share a lane when they may act
    on a common provider (directly or through a third; `providers` defaults to every one).
    Each lane keeps file order; lanes are ordered by their first policy."""
    groups: list[tuple[set[str], list[int]]] = []  # (providers, policies) of each lane
    for i, policy in enumerate(policies):
        names, members = set[str](policy.providers), [i]
        for group in [g for g in groups if g[0] & names]:  # joined through this policy
            groups.remove(group)
            names |= group[0]
            members = group[1] + members
        groups.append((names, sorted(members)))
    return sorted(members for _, members in groups)


class Stopped(Exception):
    """Another lane failed: this one stops before its next policy."""


def may_take(policy: Policy) -> bool:
    """Whether `policy` takes from the cycle's budget at all: only actions that stop, shrink
    or start instances count against it (tags and notices do not)."""
    return any(a is not None for a in (policy.stop_action, policy.scale_in_action,
                                       policy.scale_to_zero_action, policy.start_action,
                                       policy.terminate_action))


def takes_once(policy: Policy) -> bool:
    """Whether `policy` is done with the budget after its due stops (or scale-ins) took it:
    parking a group, a start or a termination take it again later in the policy."""
    return (policy.scale_to_zero_action is None and policy.start_action is None
            and policy.terminate_action is None)


class Turnstile:
    """Takes from the cycle's budget in policy order, whichever lane a policy runs in.

    A policy has passed once it can take no more: at once for one that never takes
    (`may_take`), after its take for one that takes once, else when it has finished. A take
    waits until every policy before it has passed, so the takes come in the same order as
    in a sequential run, while what each policy does with its take (the stops themselves)
    runs side by side."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._passed: set[int] = set()
        self._next = 0  # every policy before this one has passed
        self._stopped = False

    def wait_for(self, index: int) -> None:
        """Until every policy before `index` has passed; raises Stopped if a lane failed."""
        with self._cond:
            self._cond.wait_for(lambda: self._stopped or self._next >= index)
            if self._stopped:
                raise Stopped

    def check(self) -> None:
        """Raises Stopped if a lane failed."""
        with self._cond:
            if self._stopped:
                raise Stopped

    def passed(self, index: int) -> None:
        with self._cond:
            self._passed.add(index)
            while self._next in self._passed:
                self._next += 1
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()


class InTurn:
    """The cycle's budget as policy `index` takes it: after every policy before it has
    passed; with `once`, its take is its last (the policy passes with it)."""

    def __init__(self, budget: Budget, turnstile: Turnstile, index: int, *,
                 once: bool) -> None:
        self._budget, self._turnstile, self._index, self._once = budget, turnstile, index, once

    def take(self, usd_per_hour: Sequence[float], *, noun: str = "instances") -> CapVerdict:
        self._turnstile.wait_for(self._index)
        verdict = self._budget.take(usd_per_hour, noun=noun)
        if self._once:
            self._turnstile.passed(self._index)
        return verdict


class OneAtATime:
    """`store`'s sessions, one at a time across the lanes (re-entrant within one)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.RLock()

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._lock, self._store.session() as s:
            yield s


def lane_copy(runner: ActionRunner, store: Store) -> ActionRunner:
    """A copy of `runner` for one lane: its own journal rows, tag requests and turn at the
    budget, the store through `store`; the providers, safety settings and re-checks (already
    thread-safe) shared."""
    own = copy.copy(runner)
    own.db = store
    own.tag_batch = BatchTags(own)
    return own


RunOne = Callable[["ActionRunner", Policy, ActStats], None]


def side_by_side(runner: ActionRunner, policies: Sequence[Policy], groups: list[list[int]],
                 run_one: RunOne, stats: ActStats) -> None:
    """Run each lane of `groups` in a thread of its own, with a copy of `runner` per lane
    (`lane_copy`); their counts are added to `stats`."""
    turnstile = Turnstile()
    for i, policy in enumerate(policies):
        if not may_take(policy):
            turnstile.passed(i)
    store = OneAtATime(runner.db)
    failed: list[tuple[int, BaseException]] = []
    merged = threading.Lock()

    def lane(indexes: list[int]) -> None:
        own, counts = lane_copy(runner, store), ActStats()
        try:
            for i in indexes:
                one(own, i, counts)
        finally:
            with merged:
                stats.add(counts)

    def one(own: ActionRunner, i: int, counts: ActStats) -> None:
        """Policy `i` in its lane; nothing once a lane has failed (its own or another)."""
        try:
            turnstile.check()
            own.budget = InTurn(runner.budget, turnstile, i, once=takes_once(policies[i]))
            run_one(own, policies[i], counts)
        except Stopped:
            pass
        except BaseException as exc:
            failed.append((i, exc))
            turnstile.stop()
        finally:
            turnstile.passed(i)

    with ThreadPoolExecutor(len(groups), "costguard-act") as pool:
        list(pool.map(lane, groups))
    if failed:
        raise min(failed, key=lambda f: f[0])[1]
