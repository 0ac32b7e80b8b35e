"""The engine: one cycle = collect -> telemetry -> accrue -> evaluate -> act -> alert."""

from costguard.engine.cycle import CycleSummary, Engine

__all__ = ["CycleSummary", "Engine"]
