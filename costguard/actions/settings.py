"""Settings of the act stage that hold across every policy (config key `safety`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SafetySettings(BaseModel):
    """Fleet-wide blast-radius limits, on top of each policy's own `limits`.

    Per cycle, all policies together stop, start or terminate at most
    `max_actions_per_cycle` instances worth at most `max_usd_per_hour_per_cycle` of
    running cost. A policy whose due actions would cross either limit acts on none of them
    that cycle and raises a critical alert (the policies before it keep what they did).
    `recheck_before_acting` asks the provider for the instance's current state and tags
    right before each stop or terminate, where the provider can (`describe`). Where it
    re-checks many instances per call, a re-check read less than `recheck_reuse_seconds`
    ago in the same act stage (a tag policy's, just before) serves a stop too, so each
    scope is described once a cycle (0: every policy reads its own).
    """

    model_config = ConfigDict(extra="forbid")

    max_actions_per_cycle: int = Field(default=50, ge=0)
    max_usd_per_hour_per_cycle: float | None = Field(default=2000.0, gt=0)
    recheck_before_acting: bool = True
    # at most 5 minutes: a state read longer ago than that is not a re-check before acting
    recheck_reuse_seconds: float = Field(default=60.0, ge=0, le=300)
