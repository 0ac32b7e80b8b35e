"""What one act stage did, per policy: the counters a cycle summary reports."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class ActStats:
    warned: Counter[str] = field(default_factory=Counter)
    stopped: Counter[str] = field(default_factory=Counter)
    notified: Counter[str] = field(default_factory=Counter)
    tagged: Counter[str] = field(default_factory=Counter)
    dry_run: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    cleared: Counter[str] = field(default_factory=Counter)
    started: Counter[str] = field(default_factory=Counter)
    terminated: Counter[str] = field(default_factory=Counter)
    scaled_in: Counter[str] = field(default_factory=Counter)
    parked: Counter[str] = field(default_factory=Counter)  # groups scaled to zero
    restored: Counter[str] = field(default_factory=Counter)  # groups given their sizes back
    waiting: Counter[str] = field(default_factory=Counter)  # stops waiting on a pre-stop hook
    reconciled: int = 0
    interruptions: int = 0
    replaced: int = 0  # groups that replaced members costguard scaled in

    def add(self, other: ActStats) -> None:
        """Count `other`'s as well (the act stage's lanes each count their own)."""
        for name, value in vars(other).items():
            mine = getattr(self, name)
            if isinstance(mine, Counter):
                mine.update(value)
            else:
                setattr(self, name, mine + value)

    def as_dict(self) -> dict[str, object]:
        return {k: dict(v) if isinstance(v, Counter) else v for k, v in vars(self).items()}

    def by_mode(self, dry: set[str]) -> dict[str, object]:
        """`as_dict`, with `warned` split by what will happen: a dry-run policy's (`dry`:
        their names) warning sends nothing and acts on nothing (`would_warn`); only
        enforced policies' are `warned`."""
        out = self.as_dict()
        out["warned"] = {k: n for k, n in self.warned.items() if k not in dry}
        out["would_warn"] = {k: n for k, n in self.warned.items() if k in dry}
        return out
