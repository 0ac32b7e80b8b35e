"""Settings of the GCP provider: the `providers.gcp` section of costguard.yaml.

Example::

    providers:
      gcp:
        projects: [ml-training-prod, ml-research]
        max_workers: 8
        retry: {initial_s: 0.5, maximum_s: 30, deadline_s: 120}

Credentials are Application Default Credentials unless `credentials_file` names a
service-account key (discouraged: prefer workload identity, see docs/gcp.md).
"""

from __future__ import annotations

import re
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# Project ids: 6-30 chars, lowercase letters, digits, hyphens, starting with a letter.
_PROJECT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_NUMERIC = re.compile(r"^[0-9]+$")


class RetrySettings(BaseModel):
    """Exponential back-off for throttled (429) and unavailable (503) answers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    initial_s: float = Field(default=0.5, gt=0, le=60)
    maximum_s: float = Field(default=30.0, gt=0, le=600)
    multiplier: float = Field(default=2.0, ge=1, le=10)
    deadline_s: float = Field(default=120.0, gt=0, le=3600)


class GcpSettings(BaseModel):
    """Where to look (projects, or a folder/organization to list them) and how to call."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    projects: list[str] = Field(default_factory=list)
    folder: str | None = None  # "folders/123456" or "123456": every ACTIVE project below it
    organization: str | None = None  # "organizations/123456" or "123456"
    compute_endpoint: str | None = None  # e.g. Private Service Connect, or http://127.0.0.1:PORT
    monitoring_endpoint: str | None = None  # host:port; an http:// prefix means plaintext gRPC
    billing_endpoint: str | None = None  # Cloud Billing Catalog API; http://... for a fake
    tpu_endpoint: str | None = None  # Cloud TPU API; default https://tpu.googleapis.com
    # list Cloud TPU nodes (one call a project a cycle; a project whose TPU API is disabled
    # has none, said at debug level); false: Compute Engine VMs only
    tpus: bool = True
    workbench_endpoint: str | None = None  # Notebooks API; default notebooks.googleapis.com
    # list Vertex AI Workbench instances (one call a project a cycle) and govern their VMs as
    # notebooks (resource: notebook); false: VMs labelled goog-caip-notebook still are
    workbench: bool = True
    # read the Ops Agent's host memory in use and I/O wait beside the GPU metrics (two
    # ListTimeSeries a project a cycle: docs/gcp.md "Metrics"); false: the efficiency
    # verdict has Compute Engine's host CPU alone
    host_metrics: bool = True
    resource_manager_endpoint: str | None = (
        None  # default https://cloudresourcemanager.googleapis.com
    )
    credentials_file: str | None = None  # service-account key; default: ADC
    anonymous: bool = False  # no credentials at all: only for local fakes (tests, demo)
    max_workers: int = Field(default=8, ge=1, le=64)
    # concurrent per-VM calls of describe_many / stop_many / set_tags_many where no HTTP
    # batch is used
    batch_workers: int = Field(default=16, ge=1, le=64)
    # stops, relabels and operation polls of many VMs go in Compute Engine HTTP batch
    # requests (up to 1,000 calls each); false: one call per VM, `batch_workers` at a time
    http_batch: bool = True
    # how long a batch waits for the calls of other projects acted on at the same moment to
    # join it (one request for many projects, docs/gcp.md); 0: each project's alone
    http_batch_join_ms: int = Field(default=50, ge=0, le=1000)
    # the instance listing asks for the fields costguard reads alone (a partial response);
    # false: whole VMs. On by default; an API or proxy that answers the selection with a
    # 400 turns it off for the process by itself (docs/gcp.md)
    partial_responses: bool = True
    page_size: int = Field(default=500, ge=1, le=500)
    operation_timeout_s: float = Field(default=300.0, gt=0, le=3600)
    retry: RetrySettings = Field(default_factory=RetrySettings)

    @field_validator("projects")
    @classmethod
    def _project_ids(cls, value: list[str]) -> list[str]:
        bad = [p for p in value if not _PROJECT_ID.match(p)]
        if bad:
            raise ValueError(
                f"not a GCP project id: {', '.join(map(repr, bad))}. Use the project ID "
                "(6-30 lowercase letters, digits, hyphens; e.g. 'ml-training-prod'), not the "
                "display name or project number: `gcloud projects list` shows it."
            )
        if len(set(value)) != len(value):
            raise ValueError("a project is listed twice in providers.gcp.projects; list each once")
        return value

    @field_validator("folder")
    @classmethod
    def _folder(cls, value: str | None) -> str | None:
        return _parent(value, "folders", "folder")

    @field_validator("organization")
    @classmethod
    def _organization(cls, value: str | None) -> str | None:
        return _parent(value, "organizations", "organization")

    @model_validator(mode="after")
    def _some_scope(self) -> Self:
        if not (self.projects or self.folder or self.organization):
            raise ValueError(
                "providers.gcp needs `projects: [PROJECT_ID, ...]`, or `folder: folders/ID` / "
                "`organization: organizations/ID` to list the projects under it"
            )
        if self.anonymous and self.credentials_file:
            raise ValueError(
                "providers.gcp: `anonymous: true` and `credentials_file` exclude each other; "
                "anonymous is only for local fakes"
            )
        return self

    @property
    def parents(self) -> list[str]:
        """Resource Manager parents whose projects are listed (may be empty)."""
        return [p for p in (self.folder, self.organization) if p]


def _parent(value: str | None, kind: str, field: str) -> str | None:
    if value is None:
        return None
    number = value.removeprefix(f"{kind}/")
    if not _NUMERIC.match(number):
        raise ValueError(
            f"providers.gcp.{field}: expected '{kind}/NUMBER' (e.g. '{kind}/123456789'), "
            f"got {value!r}"
        )
    return f"{kind}/{number}"
