"""Who pays: attribution dimensions (team, project, env, cost-center) from tags/labels.

Rules come from the policy files' `attribution:` block: per dimension a list of tag keys
tried in order (aliases; then in any case; then flattened, as a CUR for Athena names tag
columns) with a case rule, then derivation rules for instances where no key matched (name
prefix, account). Without any block, each dimension reads the tag of its name (or of its
flattened name: `cost_center` for `cost-center`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Protocol

from costguard.kept_text import cut
from costguard.model import Owner

if TYPE_CHECKING:
    from costguard.policy.schema import Attribution

class Attributable(Protocol):
    """What attribution reads: an instance, or a resource billed while nothing runs
    (standing/model.py), whose `owner` is None."""

    @property
    def tags(self) -> Mapping[str, str]: ...
    @property
    def owner(self) -> Owner | None: ...
    @property
    def name(self) -> str | None: ...
    @property
    def account(self) -> str: ...
    @property
    def launched_by(self) -> str | None: ...


DEFAULT_DIMENSIONS = ("team", "project", "env", "cost-center")
# the most characters a dimension's value keeps: what the store's columns hold (team,
# project and cost_center of cost intervals, rollups, billed lines, actions and alerts;
# tests/costs/test_attribution_long_values.py holds them to it). A tag value may be 256
# characters (AWS, Azure) and a bill's or an annotation's any length; PostgreSQL refused a
# longer one, and with it the cycle's whole accrual, every cycle
VALUE_CHARS = 128
VALUE_CHARS_OF = {"env": 64}
# what a report, a bill comparison or an anomaly calls spend no tag or rule attributes
UNATTRIBUTED = "unattributed"


class Attributor:
    def __init__(self, rules: Attribution | None = None) -> None:
        self.rules = rules

    @property
    def dimension_names(self) -> list[str]:
        if self.rules is None or not self.rules.dimensions:
            return list(DEFAULT_DIMENSIONS)
        return list(self.rules.dimensions)

    def dimensions(self, inst: Attributable) -> dict[str, str | None]:
        """Each dimension's value for `inst`, or None when nothing claims it. A member of
        a group or cluster inherits its owner's tags (an ASG's tags, a node pool's labels)
        where its own do not have the key."""
        tags = ({**inst.owner.tags, **{k: v for k, v in inst.tags.items() if v}}
                if inst.owner is not None and inst.owner.tags else inst.tags)
        if self.rules is None or not self.rules.dimensions:
            # the tag of the dimension's name; as a bill's flattened columns name it
            # (cost_center for cost-center), not in another case ("Team" is not "team")
            bare = _Flat(tags, flat_only=True)
            return {d: _fit(d, tags.get(d) or bare.match((d,))) for d in DEFAULT_DIMENSIONS}
        flat = _Flat(tags)
        out: dict[str, str | None] = {}
        lowered = {k.lower(): v for k, v in tags.items()}
        for dim, rule in self.rules.dimensions.items():
            value = next((tags[k] for k in rule.keys if tags.get(k)), None)
            if value is None:  # keys match case-insensitively as a second chance
                value = next((lowered[k.lower()] for k in rule.keys if lowered.get(k.lower())),
                             None)
            if value is None:
                value = flat.match(rule.keys)
            out[dim] = _case(value, rule.case) if value else None
        for derive in self.rules.derive:
            if out.get(derive.dimension):
                continue
            out[derive.dimension] = _derive(inst, derive.from_, derive.map)
        return {dim: _fit(dim, value) for dim, value in out.items()}


def _fit(dimension: str, value: str | None) -> str | None:
    """`value` cut to the characters its column keeps (`VALUE_CHARS`)."""
    return cut(value, VALUE_CHARS_OF.get(dimension, VALUE_CHARS))


class _Flat:
    """The last chance of a dimension's keys: matched in their flattened form (`flat_key`),
    as a CUR delivered for Athena names its tag columns. A bill that says
    `resource_tags_user_cost_center` cannot say whether the tag was `cost-center`,
    `CostCenter` or `cost_center`; any of those keys finds it. The tags are flattened once,
    when a dimension first needs it. `flat_only`: only tags whose keys are flat already
    (lower snake case, as such a bill writes them) take part."""

    __slots__ = ("_flat", "_only", "_tags")

    def __init__(self, tags: Mapping[str, str], *, flat_only: bool = False) -> None:
        self._tags = tags
        self._only = flat_only
        self._flat: dict[str, str] | None = None

    def match(self, keys: Sequence[str]) -> str | None:
        if not self._tags:
            return None
        flat = self._flat
        if flat is None:
            flat = self._flat = {}
            for key, value in self._tags.items():
                f = flat_key(key)
                if value and (f == key or not self._only):
                    flat.setdefault(f, value)
        return next((flat[f] for f in map(flat_key, keys) if f in flat), None)


@lru_cache(maxsize=4096)
def flat_key(key: str) -> str:
    """A name as AWS flattens it into a CUR column name (CUR 2.0's names, a legacy CUR
    delivered for Athena, its tag columns): an underscore before each capital that follows
    a letter or digit, any run of other characters one underscore, lower case
    (`CostCenter`, `cost-center` -> cost_center; `aws:createdBy` -> aws_created_by;
    `ReservationARN` -> reservation_a_r_n, as CUR 2.0's reservation_reservation_a_r_n)."""
    split = re.sub(r"(?<=[A-Za-z0-9])(?=[A-Z])", "_", key)
    return re.sub(r"[^0-9a-zA-Z]+", "_", split).strip("_").lower()


def _case(value: str, rule: str) -> str:
    value = value.strip()
    if rule == "lower":
        return value.lower()
    if rule == "upper":
        return value.upper()
    return value


def _derive(inst: Attributable, source: str, mapping: dict[str, str]) -> str | None:
    if source == "name_prefix":
        name = inst.name or inst.tags.get("Name", "")
        # longest prefix wins so "ml-plat-" beats "ml-"
        for prefix in sorted(mapping, key=len, reverse=True):
            if name.startswith(prefix):
                return mapping[prefix]
        return None
    if source == "account":
        return mapping.get(inst.account)
    if source == "launcher" and inst.launched_by:
        exact = mapping.get(inst.launched_by)
        if exact is not None:
            return exact
        # "role/vision-*" patterns: the longest matching prefix wins, as for names
        for pattern in sorted((p for p in mapping if p.endswith("*")), key=len, reverse=True):
            if inst.launched_by.startswith(pattern[:-1]):
                return mapping[pattern]
    return None
