"""The typed model of a policy file: what `policies/*.yml` may contain.

Element models live in small modules (filters, conditions, actions, spend) and are
re-exported here; `ELEMENTS` lists every element in documentation order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import timedelta
from functools import cached_property
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from costguard.model import PROVIDERS, ActionKind, ProviderName
from costguard.policy.actions import (
    NOTIFY_PLACEHOLDERS,
    TAG_PLACEHOLDERS,
    Action,
    DeleteAction,
    NotifyAction,
    PreStop,
    ScaleInAction,
    ScaleToZeroAction,
    StartAction,
    StopAction,
    TagAction,
    TerminateAction,
)
from costguard.policy.base import Duration, Element, Name, OneOrMany, format_duration
from costguard.policy.conditions import (
    Condition,
    CostOver,
    HostActivity,
    IdleCondition,
    UnderusedCondition,
    UnusedCondition,
    underused_acts_only_by_telling,
)
from costguard.policy.filters import AgeFilter, Filters, TagFilter
from costguard.policy.kinds import KINDS, ResourceName, check_against_kind
from costguard.policy.schedule import Calendar, OfficeHours
from costguard.policy.spend import (
    BUILTIN_DIMENSIONS,
    AnomalyRule,
    Attribution,
    Budget,
    DeriveRule,
    DimensionRule,
)

__all__ = [
    "BUILTIN_DIMENSIONS",
    "ELEMENTS",
    "NOTIFY_PLACEHOLDERS",
    "TAG_PLACEHOLDERS",
    "Action",
    "AgeFilter",
    "AnomalyRule",
    "Attribution",
    "Budget",
    "Calendar",
    "Condition",
    "CostOver",
    "DeleteAction",
    "DeriveRule",
    "DimensionRule",
    "Duration",
    "Element",
    "Filters",
    "HostActivity",
    "IdleCondition",
    "Limits",
    "NotifyAction",
    "OfficeHours",
    "Policy",
    "PolicyFile",
    "PolicySet",
    "PreStop",
    "ScaleInAction",
    "ScaleToZeroAction",
    "StartAction",
    "StopAction",
    "TagAction",
    "TagFilter",
    "TerminateAction",
    "UnderusedCondition",
    "UnusedCondition",
    "format_duration",
]


class Limits(Element):
    """Blast-radius limits for one policy. Per evaluation cycle the policy acts (tags or
    stops) on at most `max_actions_per_cycle` instances, and stops instances worth at
    most `max_usd_per_hour` of running cost in total. A policy due to act beyond either
    cap acts on none of them that cycle and raises a critical alert, because that many at
    once usually means a broken filter or broken telemetry. Notifications do not count.
    A volume, snapshot or address policy counts its deletes, and caps what they cost a month
    in total with `max_usd_per_month`.
    `max_snooze` is the longest an owner may snooze the policy on one instance (by
    `costguard snooze` or the `costguard:snooze-until` tag); longer snoozes are cut short."""

    yaml_key: ClassVar[str] = "limits"
    example: ClassVar[str] = """\
policies:
  - name: idle-gpu-shutdown
    filters: {gpu: true, state: running}
    condition:
      idle: {below: 5, for: 45m}
    actions:
      - notify: {to: owner}
      - stop: {grace: 15m}
    limits: {max_actions_per_cycle: 10, max_usd_per_hour: 500, max_snooze: 3d}
"""

    max_actions_per_cycle: int = Field(default=10, ge=1, description="Instances per cycle.")
    max_usd_per_hour: float | None = Field(
        default=None, gt=0, description="Hourly cost stopped per cycle (unset: no cap)."
    )
    max_snooze: Duration = Field(
        default=timedelta(days=7), description="Longest snooze an owner may set."
    )
    max_usd_per_month: float | None = Field(
        default=None, gt=0, description="Volumes, snapshots, addresses: monthly cost deleted "
        "per cycle (unset: no cap).")


class Policy(Element):
    """One rule: which instances (`filters`), when they are a finding (`condition`) and
    what to do (`actions`). New policies run in `dry-run` mode, which records what they
    would do without changing any instance; set `mode: enforce` to let them act."""

    yaml_key: ClassVar[str] = "policies[]"
    example: ClassVar[str] = """\
policies:
  - name: idle-gpu-shutdown
    description: Stop GPU instances whose SMs sat idle for 45 minutes.
    resource: instance
    providers: [aws, gcp]
    mode: dry-run
    filters:
      gpu: true
      state: running
      tags: {absent: ["costguard:protect"]}
    condition:
      idle: {signal: auto, below: 5, for: 45m}
    actions:
      - notify: {to: owner}
      - stop: {grace: 15m}
    limits: {max_actions_per_cycle: 10}
"""

    name: Name = Field(description="Unique across all loaded files.")
    description: str = Field(default="", description="Shown in notifications and reports.")
    resource: ResourceName = Field(
        default="instance", description="The kind of resource it governs (see Resource kinds "
        "below): cloud instances, Kubernetes workloads, volumes, snapshots, addresses.")
    providers: OneOrMany[ProviderName] = Field(
        default=PROVIDERS, min_length=1, description="Providers it applies to."
    )
    mode: Literal["dry-run", "enforce"] = Field(
        default="dry-run", description="`enforce` acts; `dry-run` only records."
    )
    filters: Filters = Field(default_factory=Filters, description="Which instances.")
    condition: Condition = Field(description="When an instance is a finding.")
    actions: tuple[Action, ...] = Field(min_length=1, description="What to do, in order.")
    limits: Limits = Field(default_factory=Limits, description="Blast-radius limits.")

    @field_validator("actions")
    @classmethod
    def _one_of_each_acting_kind(cls, value: tuple[Action, ...]) -> tuple[Action, ...]:
        for kind in (ActionKind.STOP, ActionKind.START, ActionKind.TERMINATE,
                     ActionKind.SCALE_IN, ActionKind.SCALE_TO_ZERO, ActionKind.DELETE):
            at = [i for i, a in enumerate(value) if a.kind is kind]
            if len(at) > 1:
                raise PydanticCustomError(
                    "actions",
                    f"{kind} appears {len(at)} times (items {', '.join(map(str, at))}); "
                    "keep one",
                )
        return value

    @model_validator(mode="after")
    def _resource_and_providers(self) -> Policy:
        """A policy's providers, filters and actions are those its kind of resource takes
        (costguard/policy/kinds.py); its providers default to the kind's."""
        kind = KINDS[self.resource]
        if "providers" not in self.model_fields_set:
            object.__setattr__(self, "providers", kind.providers)  # frozen: its default
        check_against_kind(kind, self.providers, self.filters, self.condition,
                           [a.kind for a in self.actions],
                           monthly_cap=self.limits.max_usd_per_month is not None)
        return self

    @model_validator(mode="after")
    def _lifecycle_steps_need_stop(self) -> Policy:
        kinds = {a.kind for a in self.actions}
        underused_acts_only_by_telling(self.condition.underused, {str(k) for k in kinds})
        for kind in (ActionKind.START, ActionKind.TERMINATE):
            if kind in kinds and ActionKind.STOP not in kinds:
                raise PydanticCustomError(
                    "actions",
                    f"{kind} acts only on instances this policy stopped: add a `stop` step",
                )
        if ActionKind.START in kinds and self.condition.outside_hours is None:
            raise PydanticCustomError(
                "actions",
                "start: {at_office_hours: true} needs condition.outside_hours to know when "
                "office hours begin",
            )
        if ActionKind.SCALE_TO_ZERO in kinds and self.condition.outside_hours is None:
            raise PydanticCustomError(
                "actions",
                "scale_to_zero parks groups outside office hours: it needs "
                "condition.outside_hours to know when they are",
            )
        if ActionKind.START in kinds and ActionKind.TERMINATE in kinds:
            raise PydanticCustomError(
                "actions", "a policy cannot both start and terminate what it stopped; pick one"
            )
        return self

    @property
    def is_enforced(self) -> bool:
        """True when the policy really acts; False in dry-run."""
        return self.mode == "enforce"

    def _first(self, kind: ActionKind) -> Action | None:
        return self._firsts.get(kind)

    @cached_property
    def _firsts(self) -> dict[ActionKind, Action]:
        """The first step of each kind the policy takes (the act stage asks per finding)."""
        firsts: dict[ActionKind, Action] = {}
        for a in self.actions:
            firsts.setdefault(a.kind, a)
        return firsts

    @property
    def stop_action(self) -> StopAction | None:
        """The policy's stop step, if any."""
        found = self._first(ActionKind.STOP)
        return found.stop if found else None

    @property
    def notify_action(self) -> NotifyAction | None:
        """The policy's first notify step, if any."""
        found = self._first(ActionKind.NOTIFY)
        return found.notify if found else None

    @property
    def tag_action(self) -> TagAction | None:
        """The policy's first tag step, if any."""
        found = self._first(ActionKind.TAG)
        return found.tag if found else None

    @property
    def scale_in_action(self) -> ScaleInAction | None:
        """The policy's scale_in step, if any."""
        found = self._first(ActionKind.SCALE_IN)
        return found.scale_in if found else None

    @property
    def scale_to_zero_action(self) -> ScaleToZeroAction | None:
        """The policy's scale_to_zero step, if any."""
        found = self._first(ActionKind.SCALE_TO_ZERO)
        return found.scale_to_zero if found else None

    @property
    def start_action(self) -> StartAction | None:
        """The policy's start step, if any."""
        found = self._first(ActionKind.START)
        return found.start if found else None

    @property
    def terminate_action(self) -> TerminateAction | None:
        """The policy's terminate step, if any."""
        found = self._first(ActionKind.TERMINATE)
        return found.terminate if found else None

    @property
    def delete_action(self) -> DeleteAction | None:
        """The policy's delete step (volumes, snapshots, addresses), if any."""
        found = self._first(ActionKind.DELETE)
        return found.delete if found else None


class PolicyFile(Element):
    """A whole policy file. Each section is optional, but a file must define at least one.
    Several files are merged: policies, budgets and anomalies add up (names must be unique
    across files) and at most one file may define `attribution`."""

    yaml_key: ClassVar[str] = "(file)"
    example: ClassVar[str] = """\
policies:
  - name: idle-gpu-shutdown
    filters: {gpu: true, state: running, tags: {absent: ["costguard:protect"]}}
    condition:
      idle: {below: 5, for: 45m}
    actions:
      - notify: {to: owner}
      - stop: {grace: 15m}
attribution:
  dimensions:
    team: {keys: [team, Team], case: lower}
budgets:
  - {name: research-monthly, dimension: team, value: research, monthly_usd: 50000}
anomalies:
  - {name: team-daily-spend, dimension: team, min_impact_usd: 200}
"""

    policies: tuple[Policy, ...] = Field(default=(), description="Policies.")
    attribution: Attribution | None = Field(default=None, description="Attribution rules.")
    budgets: tuple[Budget, ...] = Field(default=(), description="Budgets.")
    anomalies: tuple[AnomalyRule, ...] = Field(default=(), description="Anomaly rules.")

    @model_validator(mode="after")
    def _defines_something(self) -> PolicyFile:
        if not self.model_fields_set:
            raise PydanticCustomError(
                "empty_file",
                "the file defines nothing: give at least one of policies, attribution, "
                "budgets, anomalies",
            )
        return self


def _duplicates(names: Iterable[str]) -> list[str]:
    return sorted(n for n, count in Counter(names).items() if count > 1)


class PolicySet(Element):
    """Everything loaded from all policy files, merged and checked as a whole.

    Build it with `costguard.policy.load.load_policy_set`, which reports problems with
    file and line; constructing it directly still refuses duplicates and unknown dimensions.
    """

    policies: tuple[Policy, ...] = ()
    attribution: Attribution | None = None
    budgets: tuple[Budget, ...] = ()
    anomalies: tuple[AnomalyRule, ...] = ()
    origins: dict[str, str] = Field(
        default_factory=dict, description="Policy name -> 'file:line' of its definition."
    )

    @model_validator(mode="after")
    def _consistent(self) -> PolicySet:
        for kind, items in (
            ("policy", self.policies),
            ("budget", self.budgets),
            ("anomaly", self.anomalies),
        ):
            dup = _duplicates(i.name for i in items)
            if dup:
                raise ValueError(f"{kind} name {dup[0]!r} is defined more than once")
        known = self.dimensions
        rules: list[Budget | AnomalyRule] = [*self.budgets, *self.anomalies]
        for rule in rules:
            if rule.dimension not in known:
                raise ValueError(
                    f"{rule.name!r} uses unknown dimension {rule.dimension!r} "
                    f"(known: {', '.join(known)})"
                )
        return self

    @property
    def dimensions(self) -> tuple[str, ...]:
        """Attribution dimensions followed by the built-in ones."""
        own = tuple(self.attribution.dimensions) if self.attribution else ()
        return own + BUILTIN_DIMENSIONS

    def policy(self, name: str) -> Policy:
        """The policy called `name`; KeyError if there is none."""
        for p in self.policies:
            if p.name == name:
                return p
        raise KeyError(
            f"no policy named {name!r} (loaded: "
            f"{', '.join(p.name for p in self.policies) or 'none'})"
        )


ELEMENTS: tuple[type[Element], ...] = (
    PolicyFile,
    Policy,
    Filters,
    TagFilter,
    AgeFilter,
    Condition,
    IdleCondition,
    HostActivity,
    UnderusedCondition,
    UnusedCondition,
    CostOver,
    OfficeHours,
    Action,
    NotifyAction,
    TagAction,
    StopAction,
    PreStop,
    Calendar,
    StartAction,
    TerminateAction,
    ScaleInAction,
    ScaleToZeroAction,
    DeleteAction,
    Limits,
    Attribution,
    DimensionRule,
    DeriveRule,
    Budget,
    AnomalyRule,
)
"""Every element of the policy language, in documentation order."""
