"""Warnings about valid policies that will not do what their author may expect. They are
shown by `costguard validate` (and logged when the daemon loads policies) with
FILE:LINE:COL and the fix; they never stop a policy from loading."""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from costguard.errors import SourceError
from costguard.policy.schema import Policy
from costguard.yamlpos import PositionMap

MANAGED_FIX = (
    "add `managed: false` to its filters to govern plain instances only, or add a "
    "`scale_in` step to shrink Auto Scaling groups and managed instance groups by their idle "
    "members (Kubernetes nodes are only ever reported)")


def managed_stop_warning(policy: Policy) -> str | None:
    """The warning for a policy whose `stop`/`terminate` would meet controller-owned
    members (its filters do not exclude them) while it has no way to act through their
    controllers; None when there is nothing to say."""
    if policy.stop_action is None and policy.terminate_action is None:
        return None
    if (policy.filters.managed is False or policy.scale_in_action is not None
            or policy.scale_to_zero_action is not None):
        return None
    verb = "stop" if policy.stop_action is not None else "terminate"
    return (f"policy {policy.name!r}: its filters also select instances that a controller "
            f"owns (Auto Scaling group, managed instance group, node pool, cluster); costguard "
            f"never {verb}s those, it only reports them. Fix: {MANAGED_FIX}")


def policy_warnings(filename: str, policies: Iterable[Policy], positions: PositionMap
                    ) -> list[SourceError]:
    """Every warning for one file's policies, at the step it is about."""
    out: list[SourceError] = []
    for i, policy in enumerate(policies):
        message = managed_stop_warning(policy)
        if message is None:
            continue
        step = next(j for j, a in enumerate(policy.actions)
                    if a.kind.value in ("stop", "terminate"))
        path: tuple[Hashable, ...] = ("policies", i, "actions", step)
        pos = positions.nearest(path)[1]
        out.append(SourceError(filename, pos.line, pos.column, f"warning: {message}"))
    return out
