"""A small evaluator of the condition operators costguard's generated IAM policies use
(Null, StringEquals(IgnoreCase), StringNotEquals, ForAllValues:StringEquals/NotEquals), to
check what a policy allows against what the code does, spelling by spelling."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _values(v: Any) -> list[str]:
    return [str(x) for x in v] if isinstance(v, list) else [str(v)]


def _holds(op: str, key: str, want: Any, context: Mapping[str, str | None]) -> bool:
    got = context.get(key)
    if op == "Null":
        return (got is None) == (str(want).lower() == "true")
    if op == "StringEquals":
        return got is not None and got in _values(want)
    if op == "StringEqualsIgnoreCase":
        return got is not None and got.lower() in [w.lower() for w in _values(want)]
    if op == "StringNotEquals":  # true for an absent key, as in IAM
        return got is None or got not in _values(want)
    raise AssertionError(f"operator {op} not modelled")


def allows(policy: Mapping[str, Any], action: str, tags: Mapping[str, str],
           key_prefix: str = "aws:ResourceTag/") -> bool:
    """Does any Allow statement of `policy` grant `action` on a resource with `tags`?"""
    context = {f"{key_prefix}{k}": v for k, v in tags.items()}
    for st in policy["Statement"]:
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        if st["Effect"] != "Allow" or action not in actions:
            continue
        conditions = st.get("Condition", {})
        if all(_holds(op, key, want, context) for op, pairs in conditions.items()
               for key, want in pairs.items()):
            return True
    return False
