"""What a policy does about a finding: `actions:` and its kinds."""

from __future__ import annotations

import re
import string
from collections.abc import Iterable
from datetime import timedelta
from functools import cached_property
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from costguard.model import ActionKind
from costguard.policy.base import Duration, Element, OneOrMany, Text, TypeLabel, at_least
from costguard.policy.schedule import Calendar

NOTIFY_PLACEHOLDERS = (
    "policy",
    "instance",
    "reason",
    "deadline",
    "usd_per_hour",
    "spot_savings_usd_per_hour",
)
"""Fields a notify `message` may use, e.g. `{instance}`; the notifier fills them."""

TAG_PLACEHOLDERS = ("now", "policy", "deadline")
"""Fields a tag value may use: `{now}` is the ISO-8601 UTC time of the action, `{deadline}`
the time the policy's `stop` will act (empty without a stop)."""

_RECIPIENT = re.compile(r"owner|team|slack:#[a-z0-9][a-z0-9._-]*|email:[^@\s]+@[^@\s]+\.[^@\s]+")


def _check_recipient(value: str) -> str:
    if not _RECIPIENT.fullmatch(value):
        raise PydanticCustomError(
            "recipient",
            f"invalid recipient {value!r} (use owner, team, slack:#channel or "
            "email:name@example.com)",
        )
    return value


Recipient = Annotated[str, AfterValidator(_check_recipient), TypeLabel("recipient")]


def _field_names(text: str) -> list[str]:
    """Every `{field}` in a format string, including those nested in format specs."""
    names: list[str] = []
    for _, name, spec, _ in string.Formatter().parse(text):
        if name is not None:
            names.append(name)
        if spec:
            names.extend(_field_names(spec))
    return names


def check_template(text: str, allowed: Iterable[str]) -> str:
    """Refuse `{field}` placeholders outside `allowed`, so a typo fails at load time."""
    names = tuple(allowed)
    try:
        fields = _field_names(text)
    except ValueError as exc:
        raise PydanticCustomError(
            "template", f"{exc} in {text!r} (write {{{{ and }}}} for literal braces)"
        ) from None
    for name in fields:
        if name not in names:
            available = ", ".join("{" + n + "}" for n in names)
            raise PydanticCustomError(
                "template", f"unknown placeholder {{{name}}} (available: {available})"
            )
    return text


TagValue = Annotated[str, AfterValidator(lambda v: check_template(v, TAG_PLACEHOLDERS))]


class NotifyAction(Element):
    """Tell people about the finding. `to` takes `owner` and `team` (resolved from the
    instance's attribution tags), `slack:#channel` and `email:address`. When a `stop`
    follows, the message carries its deadline and how to snooze. `message` is optional
    extra text and may use the placeholders {policy}, {instance}, {reason}, {deadline},
    {usd_per_hour} and {spot_savings_usd_per_hour}.
    """

    yaml_key: ClassVar[str] = "actions[].notify"
    example: ClassVar[str] = """\
policies:
  - name: on-demand-gpu-reminder
    filters: {gpu: true, lifecycle: on-demand, state: running}
    condition:
      running_longer_than: 6h
    actions:
      - notify:
          to: [owner, team, "slack:#ml-costs", "email:finops@example.com"]
          message: "{instance} costs ${usd_per_hour}/h on demand."
"""

    to: OneOrMany[Recipient] = Field(default=("owner",), min_length=1, description="Who to tell.")
    message: str | None = Field(default=None, description="Extra text (placeholders ok).")

    @field_validator("message")
    @classmethod
    def _known_placeholders(cls, value: str | None) -> str | None:
        return None if value is None else check_template(value, NOTIFY_PLACEHOLDERS)


class TagAction(Element):
    """Set or remove tags on the instance, e.g. to mark when it was first found idle.
    Values may use {now} (ISO-8601 UTC), {policy} and {deadline} (when the policy's
    `stop` will act: tag a resource with its deadline as a visible escalation step)."""

    yaml_key: ClassVar[str] = "actions[].tag"
    example: ClassVar[str] = """\
policies:
  - name: mark-idle-gpus
    filters: {gpu: true, state: running}
    condition:
      idle: {below: 5, for: 1h}
    actions:
      - tag:
          set: {"costguard:idle-since": "{now}", "costguard:policy": "{policy}"}
          remove: ["costguard:active-since"]
"""

    set_: dict[Text, TagValue] = Field(
        default_factory=dict, alias="set", description="Tag key -> value to write."
    )
    remove: OneOrMany[Text] = Field(default=(), description="Tag keys to delete.")
    overwrite: bool = Field(
        default=True, description="false: a key the instance already carries keeps its "
        "value (a since-marker such as costguard:untagged-since keeps its first time, "
        "however often the policy notices the instance again).")

    @model_validator(mode="after")
    def _does_something(self) -> TagAction:
        if not self.set_ and not self.remove:
            raise PydanticCustomError("tag_action", "give tags to `set` or to `remove`")
        overlap = sorted(set(self.set_) & set(self.remove))
        if overlap:
            raise PydanticCustomError(
                "tag_action",
                f"tag {', '.join(repr(k) for k in overlap)} is both set and removed",
            )
        return self


HostBusy = Literal["hold", "stop"]
HookSignal = Literal["SIGUSR1", "SIGUSR2", "SIGINT", "SIGTERM", "SIGHUP"]


class PreStop(Element):
    """What runs on the host before the stop, through costguard's agent there (docs/actions.md
    "Pre-stop hooks"). Either `signal`: sent to the processes holding the GPUs (a trainer
    that catches SIGUSR1 writes a checkpoint), which then get `timeout` to checkpoint or exit;
    or `host_command: true`: the agent runs the command its own configuration names
    (`costguard agent --pre-stop-command`), within `timeout`. The daemon never sends a
    command line to a host.

    At the stop's deadline the daemon asks the agent, waits for its report (a later cycle),
    and stops only after the hook succeeded, or failed or timed out where `on_failure` /
    `on_timeout` say `stop`; `hold` cancels this stop (the next episode warns again). An
    agent that does not report by `timeout` + 5 minutes counts as timed out. A host no agent
    reported from in 24 hours, or an agent with no command configured, skips the hook, and
    the journal says so.
    In `dry-run` nothing is run on any host.
    """

    yaml_key: ClassVar[str] = "actions[].stop.pre_stop"
    example: ClassVar[str] = """\
policies:
  - name: stop-idle-training-boxes
    mode: enforce
    filters: {gpu: true, state: running, tags: {values: {workload: [training]}}}
    condition:
      idle: {below: 5, for: 45m}
    actions:
      - notify: {to: owner}
      - stop:
          grace: 15m
          pre_stop: {signal: SIGUSR1, timeout: 5m, on_failure: hold}
"""

    signal: HookSignal | None = Field(
        default=None, description="Send this to the processes holding the GPUs.")
    host_command: bool = Field(
        default=False, description="Run the command the host's agent is configured with.")
    timeout: Annotated[Duration, AfterValidator(at_least(timedelta(seconds=10), "a hook "
                       "needs time to run"))] = Field(
        default=timedelta(minutes=5),
        description="The command's time limit; after a signal, the time to checkpoint.")
    on_failure: HostBusy = Field(
        default="hold", description="The command failed (or no process could be signalled "
        "that held a GPU): `hold` cancels the stop, `stop` stops anyway.")
    on_timeout: HostBusy = Field(
        default="hold", description="The command ran past `timeout`, or the agent never "
        "reported: `hold` or `stop`.")

    @model_validator(mode="after")
    def _one_kind(self) -> PreStop:
        if (self.signal is None) == (not self.host_command):
            raise PydanticCustomError(
                "pre_stop", "give one of `signal` (e.g. SIGUSR1) or `host_command: true`")
        return self


class StopAction(Element):
    """Stop (never terminate) the instance. The owner is warned first; the stop happens
    only if the instance still matches the policy when `grace` has passed, and it is
    re-checked right before the call. In `dry-run` mode the stop is only recorded.
    """

    yaml_key: ClassVar[str] = "actions[].stop"
    example: ClassVar[str] = """\
policies:
  - name: stop-idle-gpus
    mode: dry-run
    filters: {gpu: true, state: running, tags: {absent: ["costguard:protect"]}}
    condition:
      idle: {below: 5, for: 45m}
    actions:
      - notify: {to: owner}
      - stop: {grace: 15m}
"""

    grace: Duration = Field(
        default=timedelta(minutes=15), description="Warning time before the stop."
    )
    calendar: Calendar | None = Field(
        default=None, description="Count `grace` on business days of this calendar only."
    )
    when_host_busy: HostBusy = Field(
        default="hold", description="`hold`: never stop an idle-but-busy instance (its host "
        "shows work in progress, `condition.idle.host`); `stop`: stop on the GPUs alone.")
    pre_stop: PreStop | None = Field(
        default=None, description="A checkpoint to run on the host first (see PreStop).")


class StartAction(Element):
    """Start instances this policy stopped when office hours begin again. Needs the
    policy's `condition.outside_hours`: an instance the policy stopped outside office
    hours is started at the first cycle inside them (not on weekends or holidays). Only
    instances costguard itself stopped are started; a box someone stopped by hand stays
    stopped. Dry-run policies only record the start."""

    yaml_key: ClassVar[str] = "actions[].start"
    example: ClassVar[str] = """\
policies:
  - name: dev-gpus-nights-and-weekends
    mode: enforce
    filters: {gpu: true, state: running, tags: {values: {env: [dev]}}}
    condition:
      outside_hours: {timezone: America/New_York, hours: "07:30-20:00", holidays: US}
    actions:
      - notify: {to: owner}
      - stop: {grace: 15m}
      - start: {at_office_hours: true}
"""

    at_office_hours: bool = Field(
        default=True, description="Start again when the office hours begin."
    )


class TerminateAction(Element):
    """Terminate an instance this policy stopped once it has stayed stopped for
    `after_stopped`, optionally snapshotting its disks first. This is the only way
    costguard ever terminates anything, and it must be written into a policy explicitly.
    The owner is warned `warn_before` the termination; starting the instance, tagging it
    `costguard:protect` or snoozing it cancels it. On AWS the snapshots are EBS
    snapshots, on GCP persistent-disk snapshots, taken and completed before the instance is
    terminated; `costguard iam` then includes the permissions this needs.
    """

    yaml_key: ClassVar[str] = "actions[].terminate"
    example: ClassVar[str] = """\
policies:
  - name: idle-scratch-gpus
    mode: enforce
    filters: {gpu: true, state: running, tags: {values: {env: [scratch]}}}
    condition:
      idle: {below: 5, for: 45m}
    actions:
      - notify: {to: owner}
      - stop: {grace: 15m}
      - terminate: {after_stopped: 7d, snapshot: true, warn_before: 1d}
"""

    after_stopped: Annotated[
        Duration, AfterValidator(at_least(timedelta(hours=1), "owners need time to react"))
    ] = Field(default=timedelta(days=7), description="Time stopped before terminating.")
    snapshot: bool = Field(default=True, description="Snapshot the disks first.")
    warn_before: Duration = Field(
        default=timedelta(days=1), description="Warning time before terminating."
    )


class ScaleInAction(StopAction):
    """Shrink the group that owns an idle instance by that instance: on AWS
    `TerminateInstanceInAutoScalingGroup` with `ShouldDecrementDesiredCapacity`, on GCP the
    managed instance group's `deleteInstances` (its target size drops), so the controller
    does not launch a replacement. It acts only on members of Auto Scaling groups and
    managed instance groups, never takes a group below its minimum size (MinSize, or the
    autoscaler's minimum), and follows the same warn, grace, re-check, journal and limits as
    `stop`; `costguard:protect` and `costguard:snooze-until` are read on the instance and on
    the group. Plain instances are left to `stop`; Kubernetes nodes are only reported (the
    cluster's autoscaler drains them)."""

    yaml_key: ClassVar[str] = "actions[].scale_in"
    example: ClassVar[str] = """\
policies:
  - name: idle-gpu-groups
    mode: dry-run
    filters: {gpu: true, state: running, managed: true, owner_kind: [asg, mig]}
    condition:
      idle: {below: 5, for: 45m}
    actions:
      - notify: {to: owner}
      - scale_in: {grace: 15m}
"""


class ScaleToZeroAction(Element):
    """Park whole groups outside office hours: an Auto Scaling group with a member the
    policy selects is resized to zero (MinSize 0, DesiredCapacity 0; MaxSize kept) when
    `condition.outside_hours` holds, and restored to the sizes it had when office hours
    begin. The previous sizes are kept in costguard's journal (a daemon restart in between
    loses nothing); the group carries them as a hint in the tag `costguard:parked-sizes`
    (min/desired/max). `costguard:protect` on the group keeps it running. On GCP a managed
    instance group's target size is set to zero and back; one run by an autoscaler is left
    alone (the autoscaler would undo it: give it a scaling schedule). Members of groups the
    policy parks are not stopped one by one; Kubernetes nodes are only reported."""

    yaml_key: ClassVar[str] = "actions[].scale_to_zero"
    example: ClassVar[str] = """\
policies:
  - name: dev-gpu-groups-nights-and-weekends
    mode: enforce
    filters: {gpu: true, state: running, owner_kind: asg, tags: {values: {env: [dev]}}}
    condition:
      outside_hours: {timezone: Europe/Berlin, hours: "08:00-19:00", holidays: DE}
    actions:
      - notify: {to: owner}
      - scale_to_zero: {restore_at_office_hours: true}
"""

    restore_at_office_hours: bool = Field(
        default=True, description="Restore the previous sizes when office hours begin."
    )


class DeleteAction(Element):
    """Delete a volume or snapshot, or release an address, that the policy found unused
    (`resource: volume | snapshot | address` only). The owner is warned first; `grace`
    later costguard reads the resource again and deletes it only if it is still unused,
    unattached, unprotected (`costguard:protect`), not snoozed and the same resource (not
    one recreated under its id). A volume is snapshotted first (`snapshot: true`, the
    default): the snapshot must complete before the volume is deleted (a snapshot still
    pending keeps the delete waiting, cycle after cycle), is tagged
    `costguard:snapshot-of=<volume>`, copies the volume's tags, is named in the journal and
    the alert, and is never deleted by costguard. Like every action it is dry-run until the
    policy is enforced, capped by `limits` (count, and `max_usd_per_month` of storage
    deleted a cycle) and journaled."""

    yaml_key: ClassVar[str] = "actions[].delete"
    example: ClassVar[str] = """\
policies:
  - name: unattached-volumes
    resource: volume
    mode: enforce
    filters: {attached: false, tags: {absent: ["costguard:protect"]}}
    condition:
      unused: {for: 30d}
    actions:
      - notify: {to: [owner, team]}
      - delete: {grace: 3d, snapshot: true}
    limits: {max_actions_per_cycle: 20, max_usd_per_month: 2000}
"""

    grace: Annotated[
        Duration, AfterValidator(at_least(timedelta(hours=1), "owners need time to react"))
    ] = Field(default=timedelta(days=3), description="Warning time before deleting.")
    snapshot: bool = Field(
        default=True, description="Volumes: snapshot first, delete once it completes.")


_KINDS = ("notify", "tag", "stop", "start", "terminate", "scale_in", "scale_to_zero",
          "delete")
_KINDS_TEXT = ", ".join(_KINDS[:-1]) + " or " + _KINDS[-1]


class Action(Element):
    """One step of a policy's `actions` list: a mapping with exactly one key, `notify`,
    `tag`, `stop`, `start`, `terminate`, `scale_in`, `scale_to_zero` or `delete` (which
    steps a policy may take depends on its kind of resource). Steps run in order.
    A bare `- stop` or `- notify` uses the defaults.
    """

    yaml_key: ClassVar[str] = "actions[]"
    example: ClassVar[str] = """\
policies:
  - name: idle-gpu-warn-tag-stop
    filters: {gpu: true, state: running}
    condition:
      idle: {below: 5, for: 45m}
    actions:
      - notify: {to: owner}
      - tag: {set: {"costguard:idle-since": "{now}"}}
      - stop
"""

    notify: NotifyAction | None = Field(default=None, description="See NotifyAction.")
    tag: TagAction | None = Field(default=None, description="See TagAction.")
    stop: StopAction | None = Field(default=None, description="See StopAction.")
    start: StartAction | None = Field(default=None, description="See StartAction.")
    terminate: TerminateAction | None = Field(default=None, description="See TerminateAction.")
    scale_in: ScaleInAction | None = Field(default=None, description="See ScaleInAction.")
    scale_to_zero: ScaleToZeroAction | None = Field(
        default=None, description="See ScaleToZeroAction.")
    delete: DeleteAction | None = Field(default=None, description="See DeleteAction.")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str) and data in _KINDS:
            return {data: {}}
        if isinstance(data, dict):
            return {k: ({} if v is None and k in _KINDS else v) for k, v in data.items()}
        return data

    @model_validator(mode="after")
    def _exactly_one(self) -> Action:
        given = [k for k in _KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            detail = (
                "got none"
                if not given
                else f"got {' and '.join(given)}; put each in its own list item"
            )
            raise PydanticCustomError(
                "action",
                f"each action needs exactly one of {_KINDS_TEXT} ({detail})",
            )
        return self

    @cached_property
    def kind(self) -> ActionKind:
        """Which kind of step this is (worked out once: the act stage asks per finding)."""
        return ActionKind(next(k for k in _KINDS if getattr(self, k) is not None))

    @property
    def spec(self) -> (NotifyAction | TagAction | StopAction | StartAction | TerminateAction
                       | ScaleToZeroAction | DeleteAction):
        """The step's settings."""
        found = (self.notify or self.tag or self.stop or self.start or self.terminate
                 or self.scale_in or self.scale_to_zero or self.delete)
        assert found is not None
        return found
