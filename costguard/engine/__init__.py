"""The engine: one cycle = collect -> telemetry -> accrue -> evaluate -> act -> alert."""

from costguard.engine.cycle import Engine
from costguard.engine.summary import CycleSummary

__all__ = ["CycleSummary", "Engine"]
