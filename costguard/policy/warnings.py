"""Warnings about valid policies that will not do what their author may expect. They are
shown by `costguard validate` (and logged when the daemon loads policies) with
FILE:LINE:COL and the fix; they never stop a policy from loading."""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from costguard.errors import SourceError
from costguard.policy.kinds import KINDS
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
    if "managed" not in KINDS[policy.resource].filters:
        return None  # a workload is stopped through its controller; a notebook has none
    if (policy.filters.managed is False or policy.scale_in_action is not None
            or policy.scale_to_zero_action is not None):
        return None
    verb = "stop" if policy.stop_action is not None else "terminate"
    return (f"policy {policy.name!r}: its filters also select instances that a controller "
            f"owns (Auto Scaling group, managed instance group, node pool, cluster); costguard "
            f"never {verb}s those, it only reports them. Fix: {MANAGED_FIX}")


def unbound_evidence_warning(policy: Policy) -> str | None:
    """The warning for a policy that counts only the agent's readings as idle evidence
    while the shared agent token is still accepted for every instance."""
    idle = policy.condition.idle
    if idle is None or idle.evidence != "agent":
        return None
    return (f"policy {policy.name!r} counts only the agent's readings as idle evidence, but "
            "http.identity.mode is optional: whoever holds the agent token can push readings "
            "for any instance. Fix: set http.identity.mode: required, so that only an "
            "instance's own agent can (docs/agent.md)")


def policy_warnings(filename: str, policies: Iterable[Policy], positions: PositionMap, *,
                    identity_required: bool = True) -> list[SourceError]:
    """Every warning for one file's policies, at the step it is about. `identity_required`:
    `http.identity.mode` is `required` (or unknown: no settings were read)."""
    out: list[SourceError] = []
    for i, policy in enumerate(policies):
        message = managed_stop_warning(policy)
        if message is not None:
            step = next(j for j, a in enumerate(policy.actions)
                        if a.kind.value in ("stop", "terminate"))
            out.append(_at(filename, positions, ("policies", i, "actions", step), message))
        message = None if identity_required else unbound_evidence_warning(policy)
        if message is not None:
            out.append(_at(filename, positions,
                           ("policies", i, "condition", "idle", "evidence"), message))
    return out


def _at(filename: str, positions: PositionMap, path: tuple[Hashable, ...], message: str
        ) -> SourceError:
    pos = positions.nearest(path)[1]
    return SourceError(filename, pos.line, pos.column, f"warning: {message}")
