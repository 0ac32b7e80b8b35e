"""The kinds of resource a policy governs (`resource:`), one registry.

Each kind declares what it is, the providers that hold it, the filters and actions it takes,
the permissions its providers need to read it and to act on it, and an example policy (a
test loads every one). The policy schema checks a policy against its kind from here, docs/
policies.md describes the kinds from here, and `costguard validate` names them: a new kind
of resource enters by a row here (and the provider calls behind it), not by a branch in
every stage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel
from pydantic_core import PydanticCustomError

from costguard.model import PROVIDERS, ActionKind, ProviderName
from costguard.policy.base import TypeLabel
from costguard.policy.conditions import Condition
from costguard.policy.filters import Filters

# the filters every kind of compute takes
_COMMON = ("gpu", "state", "accounts", "regions", "tags", "age", "min_gpus")
_INSTANCE_ONLY = ("instance_type", "family", "lifecycle", "managed", "owner_kind")
# what a volume, snapshot or address policy selects with and decides on (costguard/standing/)
_STORAGE_FILTERS = ("accounts", "regions", "tags", "age")
_STORAGE_CONDITIONS = ("unused", "missing_tags")
_STORAGE_ACTIONS = (ActionKind.NOTIFY, ActionKind.TAG, ActionKind.DELETE)
# what a policy over running compute decides on
_COMPUTE_CONDITIONS = ("idle", "underused", "running_longer_than", "missing_tags",
                       "cost_over", "outside_hours")


def _instance_permissions(enforcing: bool) -> dict[str, list[str]]:
    from costguard.providers.aws import required_iam_policy
    from costguard.providers.gcp.iam import required_permissions

    aws = required_iam_policy(enforcing, enforcing)
    actions = sorted({a for stmt in aws["Statement"] for a in _listed(stmt.get("Action"))})
    return {"aws": actions, "gcp": required_permissions(enforcing)}


def _workload_permissions(enforcing: bool) -> dict[str, list[str]]:
    from costguard.k8s import rbac

    verbs: dict[str, set[str]] = {}
    for rule in rbac.rules(acting=enforcing):
        for group in (g or "core" for g in rule.get("apiGroups", [""])):
            for resource in rule.get("resources", []):
                verbs.setdefault(f"{group}/{resource}", set()).update(rule.get("verbs", []))
    return {"k8s": [f"{r}: {', '.join(sorted(v))}" for r, v in sorted(verbs.items())]}


def _kind_permissions(kind: str, acting: frozenset[str] = frozenset({"delete", "tag"})
                         ) -> Callable[[bool], dict[str, list[str]]]:
    """The rights of a kind with rights of its own (storage, reservations, notebooks) on
    each cloud: reading it, and `acting`'s calls when enforced."""
    def permissions(enforcing: bool) -> dict[str, list[str]]:
        from costguard.providers.aws.iam import standing_statements
        from costguard.providers.gcp.iam import STANDING_READ, standing_permissions

        acts = acting if enforcing else frozenset()
        stmts = standing_statements({kind: acts})
        out = {"aws": sorted({a for stmt in stmts for a in _listed(stmt.get("Action"))})}
        if kind in STANDING_READ:
            out["gcp"] = standing_permissions({kind: acts})
        return out
    return permissions


NOTEBOOK_ACTS = frozenset({"stop", "start", "tag"})


def _reservation_permissions(enforcing: bool) -> dict[str, list[str]]:
    """Reading only, enforced or not: a reservation's one action is `notify` (its twins are
    read with the instances' listing rights)."""
    got = _kind_permissions("reservation", frozenset())(enforcing)
    return {**got, "gcp": sorted({*got["gcp"], "compute.instances.list"})}


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value or [])


@dataclass(frozen=True)
class ResourceKind:
    name: str  # what `resource:` says
    what: str  # what it is, in a phrase ("cloud instances (VMs)")
    providers: tuple[ProviderName, ...]  # the providers that hold it (a policy's default)
    filters: tuple[str, ...]  # the `filters:` keys it takes
    conditions: tuple[str, ...]  # the `condition:` keys it takes
    actions: tuple[ActionKind, ...]  # the actions it takes
    permissions: Callable[[bool], dict[str, list[str]]]  # read (False) / act (True)
    docs: str  # where it is described
    example: str  # a policy of this kind (loaded by a test)
    # governed by the standing stage (costguard/standing/), not as instances are
    standing: bool = False
    # its rights come from the providers' per-kind tables (aws/gcp iam.py STANDING_READ),
    # with the actions its enforced policies take; an instance's or a workload's do not
    own_rights: bool = False
    # said after "X does not apply to a <kind>: its actions are ..."
    action_hint: str = ""


def _storage(name: str, what: str, filters: tuple[str, ...], example: str,
             providers: tuple[ProviderName, ...] = ("aws", "sim")) -> ResourceKind:
    """A kind that bills while nothing runs (costguard/standing/): its providers, filters,
    conditions and actions are those of storage."""
    return ResourceKind(
        name=name, what=what, providers=providers, filters=(*_STORAGE_FILTERS, *filters),
        conditions=_STORAGE_CONDITIONS, actions=_STORAGE_ACTIONS,
        permissions=_kind_permissions(name), docs="docs/storage.md", example=example,
        standing=True, own_rights=True)


KINDS: dict[str, ResourceKind] = {kind.name: kind for kind in (
    ResourceKind(
        name="instance",
        what="cloud instances (EC2 instances, Compute Engine VMs, Cloud TPU nodes) and the "
             "simulated cloud's",
        providers=PROVIDERS,
        filters=(*_COMMON, *_INSTANCE_ONLY),
        conditions=_COMPUTE_CONDITIONS,
        actions=tuple(a for a in ActionKind if a is not ActionKind.DELETE),
        permissions=_instance_permissions,
        docs="docs/actions.md",
        example="""\
policies:
  - name: idle-accelerators
    resource: instance
    filters: {gpu: true, state: running, lifecycle: [on-demand, spot]}
    condition:
      idle: {below: 5, for: 1h}
    actions:
      - notify: {to: [owner, team]}
      - stop: {grace: 30m}
"""),
    ResourceKind(
        name="notebook",
        what="managed notebooks: SageMaker notebook instances, Vertex AI Workbench instances "
             "and the simulated cloud's",
        providers=PROVIDERS,
        filters=(*_COMMON, "instance_type", "family"),
        conditions=_COMPUTE_CONDITIONS,
        actions=(ActionKind.NOTIFY, ActionKind.TAG, ActionKind.STOP, ActionKind.START),
        permissions=_kind_permissions("notebook", NOTEBOOK_ACTS),
        docs="docs/notebooks.md", own_rights=True,
        action_hint=" (a notebook is stopped, never deleted: its storage and its work stay)",
        example="""\
policies:
  - name: idle-notebooks
    resource: notebook
    filters: {gpu: true, state: running}
    condition:
      idle: {below: 5, for: 2h}
    actions:
      - notify: {to: [owner, team]}
      - stop: {grace: 1h}
"""),
    ResourceKind(
        name="workload",
        what="Kubernetes workloads holding GPUs (Deployments, StatefulSets, Jobs, CronJobs, "
             "notebooks, bare pods)",
        providers=("k8s",),
        filters=(*_COMMON, "namespaces", "kinds"),
        conditions=_COMPUTE_CONDITIONS,
        actions=(ActionKind.NOTIFY, ActionKind.TAG, ActionKind.STOP, ActionKind.START),
        permissions=_workload_permissions,
        docs="docs/kubernetes.md",
        action_hint=" (a workload is stopped with `stop`: scaled to zero, suspended or its "
                    "notebook stopped, as its kind takes)",
        example="""\
policies:
  - name: idle-gpu-workloads
    resource: workload
    filters: {namespaces: ["team-*"], kinds: [Deployment, Notebook]}
    condition:
      idle: {below: 5, for: 1h}
    actions:
      - notify: {to: owner}
      - stop: {grace: 30m}
"""),
    _storage("volume", "block storage: EBS volumes, zonal persistent disks and the "
             "simulated cloud's, attached to nothing or only to stopped instances",
             ("attached",), """\
policies:
  - name: stopped-instance-disks
    resource: volume
    filters: {attached: true, tags: {absent: ["costguard:protect"]}}
    condition:
      unused: {for: 14d}
    actions:
      - notify: {to: [owner, team]}
      - tag: {set: {"costguard:unused-since": "{now}"}, overwrite: false}
""", ("aws", "gcp", "sim")),
    _storage("snapshot", "EBS snapshots, Compute Engine disk snapshots and the simulated "
             "cloud's that no image, launch or instance template or volume needs", (), """\
policies:
  - name: old-unused-snapshots
    resource: snapshot
    filters: {age: {older_than: 90d}}
    condition:
      unused: {for: 7d}
    actions:
      - notify: {to: team}
      - delete: {grace: 7d}
""", ("aws", "gcp", "sim")),
    _storage("address", "static public addresses: Elastic IPs, Compute Engine external "
             "addresses and the simulated cloud's, associated with nothing", (), """\
policies:
  - name: idle-addresses
    resource: address
    condition:
      unused: {for: 7d}
    actions:
      - notify: {to: owner}
      - delete: {grace: 2d}
""", ("aws", "gcp", "sim")),
    ResourceKind(
        name="reservation",
        what="capacity paid for by the hour whether used or not: EC2 On-Demand Capacity "
             "Reservations and Capacity Blocks for ML, Compute Engine reservations, and the "
             "simulated cloud's",
        providers=("aws", "gcp", "sim"), filters=_STORAGE_FILTERS,
        conditions=_STORAGE_CONDITIONS,
        actions=(ActionKind.NOTIFY,), permissions=_reservation_permissions,
        docs="docs/reservations.md", standing=True, own_rights=True,
        action_hint=" (cancelling a reservation is its owner's decision: costguard tells "
                    "them what it costs unused, and which instances could use it)",
        example="""\
policies:
  - name: unused-reservations
    resource: reservation
    condition:
      unused: {for: 2d}
    actions:
      - notify: {to: [owner, team]}
"""),
)}


def kind_names() -> str:
    """`instance`, `workload`, ...: the kinds, as an error message lists them."""
    return ", ".join(f"`{k}`" for k in KINDS)


def holding(provider: str) -> list[ResourceKind]:
    """The kinds `provider` holds."""
    return [k for k in KINDS.values() if provider in k.providers]


def taking_filter(key: str) -> list[ResourceKind]:
    return [k for k in KINDS.values() if key in k.filters]


def taking_condition(key: str) -> list[ResourceKind]:
    return [k for k in KINDS.values() if key in k.conditions]


def _known(name: str) -> str:
    if name not in KINDS:
        raise PydanticCustomError(
            "resource", f"unknown kind of resource {name!r}: costguard governs {kind_names()} "
            "(docs/policies.md, Resource kinds)")
    return name


ResourceName = Annotated[str, AfterValidator(_known), TypeLabel(
    "one of " + ", ".join(f"`{k}`" for k in KINDS))]
"""A kind of resource the registry holds: `instance`, `workload`, `volume`, `snapshot`,
`address`."""


def _a(word: str) -> str:
    """`a volume`, `an instance`, `an address`."""
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


def _plural(kinds: list[str]) -> str:
    """`instances or workloads`."""
    return " or ".join(f"{k}s" for k in kinds)


def check_against_kind(kind: ResourceKind, providers: Sequence[str], filters: Filters,
                       condition: Condition, actions: Sequence[ActionKind], *,
                       monthly_cap: bool) -> None:
    """A policy of `kind` names only providers, filters, conditions and actions the kind
    takes; `delete` needs `condition.unused`; a monthly cap belongs to a kind that deletes.
    Each refusal is a PydanticCustomError typed by the key it is about (the policy loader
    points FILE:LINE:COL at that key)."""
    for provider in providers:
        if provider not in kind.providers:
            other = [k.name for k in holding(provider)]
            raise PydanticCustomError(
                "providers", f"{provider} holds no {kind.name}s ({_a(kind.name)} policy "
                f"governs {kind.what}: providers among {', '.join(kind.providers)})"
                + (f"; give this policy `resource: {other[0]}`, or leave {provider} out"
                   if other else ""))
    sections: tuple[tuple[str, BaseModel, tuple[str, ...], Callable[[str], list[ResourceKind]],
                          str, str], ...] = (
            ("filters", filters, kind.filters, taking_filter, "selects", " selects with"),
            ("condition", condition, kind.conditions, taking_condition, "judges",
             "'s conditions are"))
    for section, given, allowed, takers_of, verb, taken in sections:
        for key in type(given).model_fields:
            if getattr(given, key) is None or key in allowed:
                continue
            takers = [k.name for k in takers_of(key)]
            raise PydanticCustomError(
                section, f"{section}.{key} {verb} {_plural(takers)}, not {kind.name}s; "
                f"{_a(kind.name)} policy{taken} {', '.join(allowed)}"
                + (f" (or give it `resource: {takers[0]}`)"
                   if takers and section == "filters" else ""))
    if monthly_cap and ActionKind.DELETE not in kind.actions:
        raise PydanticCustomError(
            "limits", f"limits.max_usd_per_month caps deletes of volumes, snapshots and "
            f"addresses; {_a(kind.name)} policy caps with max_usd_per_hour")
    if ActionKind.DELETE in actions and condition.unused is None:
        raise PydanticCustomError(
            "actions", "delete acts only on what nothing uses: add condition.unused "
            "(e.g. `unused: {for: 30d}`)")
    for action in actions:
        if action not in kind.actions:
            raise PydanticCustomError(
                "actions", f"{action} does not apply to {_a(kind.name)}: its actions are "
                f"{', '.join(kind.actions)}{kind.action_hint}")
