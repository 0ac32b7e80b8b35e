"""The `recommend:` section of costguard.yaml: the efficiency verdict's thresholds and the
cheaper fit's rules (the policy condition `underused:` takes the verdict's names too).

    recommend:
      window: 7d            # readings judged, back from now
      gpu_low: 40           # mean signal on the GPUs used below this: GPU low (percent)
      cpu_high: 75          # host CPU p95 at or above this: CPU high (percent)
      iowait_high: 20       # host iowait mean at or above this: CPU high too
      below: 5              # a GPU-minute peaking at this or more used the GPU
      used_share: 0.01      # ... in at least this share of the GPU's minutes
      min_coverage: 0.8     # GPU-minutes with readings, of the hours the instance ran
      min_hours: 24         # hours of readings needed for a verdict
      headroom: 0.2         # on VRAM, vCPUs and host memory of a fit
      architectures: same   # same | same-or-newer | any (GPU architecture of a fit)
      refresh: 1d           # the cycle judges each GPU instance again after this
      judge_per_cycle: 500  # ... at most this many per cycle, the oldest verdicts first
      judge_gpu_minutes_per_cycle: 2000000  # ... and at most this many GPU-minutes of
                            # the window in all (an 8-GPU host's week: 80,640)
      digest:               # the weekly "underused GPUs" message to each team
        enabled: true
        weekday: monday
        hour_utc: 9
        min_usd: 0          # teams whose underused spend in the window is above this
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from costguard.policy.base import Duration

Architectures = Literal["same", "same-or-newer", "any"]
Weekday = Literal["monday", "tuesday", "wednesday", "thursday", "friday", "saturday",
                  "sunday"]
WEEKDAYS: tuple[Weekday, ...] = ("monday", "tuesday", "wednesday", "thursday", "friday",
                                 "saturday", "sunday")


class WeeklyDigest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    weekday: Weekday = "monday"
    hour_utc: int = Field(default=9, ge=0, le=23)
    min_usd: float = Field(default=0.0, ge=0)


class RecommendSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    window: Duration = timedelta(days=7)
    below: float = Field(default=5.0, gt=0, le=100)
    used_share: float = Field(default=0.01, ge=0, le=1)
    gpu_low: float = Field(default=40.0, gt=0, le=100)
    cpu_high: float = Field(default=75.0, gt=0, le=100)
    iowait_high: float = Field(default=20.0, gt=0, le=100)
    min_coverage: float = Field(default=0.8, gt=0, le=1)
    min_hours: float = Field(default=24.0, ge=0)
    headroom: float = Field(default=0.2, ge=0, le=4)
    architectures: Architectures = "same"
    refresh: Duration = timedelta(days=1)
    judge_per_cycle: int = Field(default=500, ge=1)
    judge_gpu_minutes_per_cycle: int = Field(default=2_000_000, ge=1)
    digest: WeeklyDigest = Field(default_factory=WeeklyDigest)
