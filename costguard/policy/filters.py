"""Which instances a policy looks at: `filters:` and its parts."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from costguard.model import InstanceState, Lifecycle, OwnerKind
from costguard.policy.base import Duration, Element, OneOrMany, Text

WorkloadKind = Literal["Deployment", "StatefulSet", "Job", "CronJob", "Notebook",
                       "JupyterServer", "Pod"]


class TagFilter(Element):
    """Select instances by their tags (AWS tags, GCP labels).

    `present` keys must exist (any value), `absent` keys must not exist, and every key in
    `values` must exist with one of the listed values. Keys and values are compared exactly,
    case included. Use `absent: ["costguard:protect"]` to let owners opt an instance out.
    """

    yaml_key: ClassVar[str] = "filters.tags"
    example: ClassVar[str] = """\
policies:
  - name: untagged-dev-gpus
    filters:
      gpu: true
      tags:
        present: [owner]
        absent: ["costguard:protect"]
        values: {env: [dev, staging]}
    condition:
      missing_tags: [team]
    actions:
      - notify: {to: owner}
"""

    present: OneOrMany[Text] = Field(default=(), description="Tag keys that must exist.")
    absent: OneOrMany[Text] = Field(default=(), description="Tag keys that must not exist.")
    values: dict[Text, OneOrMany[str]] = Field(
        default_factory=dict,
        description="Tag key -> accepted values; the tag must exist with one of them.",
    )

    @model_validator(mode="after")
    def _not_contradictory(self) -> TagFilter:
        both = sorted(set(self.absent) & (set(self.present) | set(self.values)))
        if both:
            raise PydanticCustomError(
                "tag_filter",
                f"tag {', '.join(repr(k) for k in both)} is required and forbidden at once, "
                "so nothing can match; remove it from 'absent' or from 'present'/'values'",
            )
        return self


class AgeFilter(Element):
    """Select instances by how long ago they were launched.

    `older_than: 2h` keeps instances launched more than two hours ago; `younger_than: 30d`
    keeps those launched less than thirty days ago. Give one or both.
    """

    yaml_key: ClassVar[str] = "filters.age"
    example: ClassVar[str] = """\
policies:
  - name: old-on-demand-gpus
    filters:
      gpu: true
      age: {older_than: 2h, younger_than: 30d}
    condition:
      running_longer_than: 2h
    actions:
      - notify: {to: team}
"""

    older_than: Duration | None = Field(default=None, description="Launched longer ago than.")
    younger_than: Duration | None = Field(default=None, description="Launched more recently than.")

    @model_validator(mode="after")
    def _sensible_window(self) -> AgeFilter:
        if self.older_than is None and self.younger_than is None:
            raise PydanticCustomError(
                "age_filter", "give older_than, younger_than or both (e.g. older_than: 2h)"
            )
        if (
            self.older_than is not None
            and self.younger_than is not None
            and self.older_than >= self.younger_than
        ):
            raise PydanticCustomError(
                "age_filter",
                "older_than must be shorter than younger_than, or no instance can match",
            )
        return self


class Filters(Element):
    """Which instances the policy considers. Every filter given must match (AND); a list
    inside one filter matches any of its values (OR). Leave `filters` out to consider
    every instance of the policy's providers.

    `managed: false` keeps plain instances only; `managed: true` only members of a
    controller (Auto Scaling group, managed instance group, node pool, cluster), and
    `owner_kind` narrows those to some kinds (asg, mig, eks, karpenter, gke, emr, batch,
    ec2-fleet, spot-fleet, parallelcluster, ray, skypilot, dataproc, gcp-batch, vertex,
    unknown). `instance_type` takes shell-style globs (`p4d.*`, `a2-highgpu-*`); `family` is the
    part before the first `.` (AWS) or `-` (GCP); `accounts` are AWS account ids or GCP
    project ids, quoted so YAML keeps them as text.
    """

    yaml_key: ClassVar[str] = "filters"
    example: ClassVar[str] = """\
policies:
  - name: idle-training-gpus
    filters:
      gpu: true
      state: running
      instance_type: ["p4d.*", "p5.*", g5.xlarge]
      family: [p4d, p5, g5]
      lifecycle: on-demand
      accounts: ["123456789012"]
      regions: [us-east-1, us-west-2]
      tags:
        absent: ["costguard:protect"]
      age: {older_than: 1h}
    condition:
      idle: {below: 5, for: 45m}
    actions:
      - notify: {to: owner}
"""

    gpu: bool | None = Field(
        default=None, description="true: only instances with accelerators (GPUs, TPU chips, "
        "Trainium or Inferentia devices: docs/accelerators.md); false: only without."
    )
    state: OneOrMany[InstanceState] | None = Field(
        default=None, description="Instance states to consider."
    )
    instance_type: OneOrMany[Text] | None = Field(
        default=None, description="Instance type globs, e.g. `p4d.*`."
    )
    family: OneOrMany[Text] | None = Field(
        default=None, description="Instance families, e.g. `p4d`, `g5`, `a2`."
    )
    lifecycle: OneOrMany[Lifecycle] | None = Field(
        default=None, description="Pricing models: `on-demand`, `spot`, `capacity-block`.")
    accounts: OneOrMany[Text] | None = Field(
        default=None, description="AWS account ids / GCP project ids (quote them)."
    )
    regions: OneOrMany[Text] | None = Field(default=None, description="Region names.")
    tags: TagFilter | None = Field(default=None, description="Tag conditions.")
    age: AgeFilter | None = Field(default=None, description="Launch-age window.")
    managed: bool | None = Field(
        default=None, description="true: only controller-owned members; false: only pets."
    )
    owner_kind: OneOrMany[OwnerKind] | None = Field(
        default=None, description="Owner kinds, e.g. `asg`, `mig`, `gke` (implies managed)."
    )
    namespaces: OneOrMany[Text] | None = Field(
        default=None, description="`resource: workload` only: Kubernetes namespaces "
        "(shell patterns: `team-*`).")
    kinds: OneOrMany[WorkloadKind] | None = Field(
        default=None, description="`resource: workload` only: Deployment, StatefulSet, Job, "
        "CronJob, Notebook, JupyterServer, Pod.")
    attached: bool | None = Field(
        default=None, description="`resource: volume` only: true: only volumes attached to "
        "(stopped) instances; false: only volumes attached to nothing.")
    min_gpus: int | None = Field(
        default=None, ge=1, description="At least this many GPUs (a workload: all its pods').")
