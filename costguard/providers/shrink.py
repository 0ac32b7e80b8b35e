"""The one rule of a scale-in, whatever the cloud: a group shrinks by one member only while
that keeps it at or above its minimum; a dry run stops short of the call."""

from __future__ import annotations

from costguard.model import AT_MINIMUM, ActionOutcome, ActionResult


def shrink_by_one(group: str, size: int, low: int, *, size_name: str, min_name: str,
                  fix: str, dry_run: bool) -> tuple[ActionResult | None, str]:
    """(the final result when the call must not be made: at the minimum, or a dry run;
    None when it may), and the sizes in words for the journal."""
    if size - 1 < low:
        return ActionResult(outcome=ActionOutcome.SKIPPED,
                            detail=f"{group} is {AT_MINIMUM} ({size_name} {size}, {min_name} "
                                   f"{low}); {fix}"), ""
    sizes = f"{size_name} {size} -> {size - 1} ({min_name} {low})"
    if dry_run:
        return ActionResult(outcome=ActionOutcome.DRY_RUN,
                            detail=f"would remove it from {group}: {sizes}"), sizes
    return None, sizes
