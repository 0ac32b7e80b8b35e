"""Why a policy selects an instance or not: every filter, passed or failed, in words.

`evaluate.matches` answers the same question fast (first miss returns) for every instance in
every cycle; this answers it completely, for one instance a person asks about
(`costguard explain`). A test holds the two to the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from fnmatch import fnmatchcase

from costguard.accelerators import counted
from costguard.model import Instance
from costguard.policy.schema import Policy


@dataclass(frozen=True)
class Check:
    """One filter of a policy on one instance."""

    name: str  # the filter's YAML key, e.g. "providers", "filters.tags"
    passed: bool
    detail: str  # what was wanted and what the instance has


def _listed(values: object) -> str:
    if isinstance(values, (list, tuple, set, frozenset)):
        return ", ".join(sorted(str(v) for v in values))
    return str(values)


def _age(seconds: float) -> str:
    hours = seconds / 3600
    return f"{hours / 24:.1f} days" if hours >= 48 else f"{hours:.1f} h"


def filter_checks(policy: Policy, inst: Instance, now: datetime) -> list[Check]:
    """Every filter `policy` has, checked on `inst`; the policy selects it when all pass."""
    out: list[Check] = []

    def check(name: str, passed: bool, wanted: str, has: str) -> None:
        out.append(Check(name, passed, f"wants {wanted}; it has {has}"))

    if policy.resource != inst.kind:  # another kind: volumes, notebooks, workloads ...
        article = "an" if inst.kind[:1] in "aeiou" else "a"
        check("resource", False, f"{policy.resource}s", f"{article} {inst.kind}")
        return out
    if policy.providers:
        check("providers", inst.provider in policy.providers, _listed(policy.providers),
              inst.provider)
    f = policy.filters
    if f is None:
        return out
    if f.gpu is not None:
        check("filters.gpu", f.gpu == inst.has_gpu,
              "an accelerator (GPU, TPU, Neuron)" if f.gpu else "no accelerator",
              counted(inst.instance_type, inst.gpu_count))
    if f.state is not None:
        check("filters.state", inst.state in f.state, _listed([str(s) for s in f.state]),
              str(inst.state))
    if f.instance_type is not None:
        check("filters.instance_type",
              any(fnmatchcase(inst.instance_type, p) for p in f.instance_type),
              _listed(f.instance_type), inst.instance_type)
    if f.family is not None:
        check("filters.family", inst.family in f.family, _listed(f.family), inst.family)
    if f.lifecycle is not None:
        check("filters.lifecycle", inst.lifecycle in f.lifecycle,
              _listed([str(x) for x in f.lifecycle]), str(inst.lifecycle))
    if f.accounts is not None:
        check("filters.accounts", inst.account in f.accounts, _listed(f.accounts), inst.account)
    if f.regions is not None:
        check("filters.regions", inst.region in f.regions, _listed(f.regions), inst.region)
    if f.tags is not None:
        t = f.tags
        for key in t.present:
            check("filters.tags.present", key in inst.tags, f"tag {key}",
                  "it" if key in inst.tags else "none")
        for key in t.absent:
            check("filters.tags.absent", key not in inst.tags, f"no tag {key}",
                  f"{key}={inst.tags[key]}" if key in inst.tags else "none")
        for key, allowed in t.values.items():
            value = inst.tags.get(key)
            check("filters.tags.values", value in allowed, f"{key} in ({_listed(allowed)})",
                  f"{key}={value}" if value is not None else f"no tag {key}")
    if f.managed is not None:
        check("filters.managed", f.managed == inst.managed,
              "an instance a controller owns" if f.managed else "an instance nothing owns",
              f"owner {inst.owner}" if inst.owner is not None else "no owner")
    if f.owner_kind is not None:
        check("filters.owner_kind", inst.owner is not None and inst.owner.kind in f.owner_kind,
              _listed([str(k) for k in f.owner_kind]),
              str(inst.owner.kind) if inst.owner is not None else "no owner")
    if f.age is not None:
        age = (now - inst.launch_time).total_seconds()
        if f.age.older_than is not None:
            check("filters.age.older_than", age >= f.age.older_than.total_seconds(),
                  f"launched over {_age(f.age.older_than.total_seconds())} ago",
                  f"{_age(age)} since launch")
        if f.age.younger_than is not None:
            check("filters.age.younger_than", age < f.age.younger_than.total_seconds(),
                  f"launched under {_age(f.age.younger_than.total_seconds())} ago",
                  f"{_age(age)} since launch")
    return out
