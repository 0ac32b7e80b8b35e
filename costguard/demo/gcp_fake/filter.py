"""The regular-expression form of Compute Engine list filters, as far as the fake needs it.

`FIELD eq LITERAL` or `FIELD ne LITERAL` on a top-level string field of the resource, the
literal unquoted, 'single' or "double" quoted, read as a regular expression that must match
the whole field (the API uses RE2; the fake's patterns are plain enough for `re`). Anything
else (AIP-160 `=`, several expressions, nested fields) is refused with a 400, so a caller
that starts to rely on more than this fails in tests instead of passing on a lenient fake.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Collection, Sequence
from typing import Any

from costguard.demo.gcp_fake.http import error

Predicate = Callable[[dict[str, Any]], bool]

_EXPR = re.compile(
    r"""^\s*(?P<field>[A-Za-z][A-Za-z0-9]*)\s+(?P<op>eq|ne)\s+"""
    r"""(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)'|(?P<bare>[^\s"'()]+))\s*$""")


def parse(expression: str) -> Predicate:
    """A predicate on a resource's JSON; ValueError for what the fake does not understand."""
    m = _EXPR.match(expression)
    if m is None:
        raise ValueError(f"the fake only filters by `field eq|ne 'regex'`: {expression!r}")
    field, negate = m["field"], m["op"] == "ne"
    literal = next(v for v in (m["dq"], m["sq"], m["bare"]) if v is not None)
    try:
        pattern = re.compile(literal)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {literal!r}: {exc}") from None

    def matches(resource: dict[str, Any]) -> bool:
        value = resource.get(field)
        hit = isinstance(value, str) and pattern.fullmatch(value) is not None
        return hit != negate

    return matches


def aggregated(listed: Sequence[tuple[str, dict[str, Any]]], query: dict[str, str], *,
               kind: str, key: str, unreachable: Collection[str] = ()) -> tuple[int, Any]:
    """One page of an aggregatedList: `listed` is (zone, resource JSON) in a stable order;
    `filter` applies before paging (maxResults, pageToken), as in the API. An `unreachable`
    zone's resources are left out and its scope carries an UNREACHABLE warning."""
    listed = [(zone, res) for zone, res in listed if zone not in unreachable]
    if "filter" in query:
        try:
            keep = parse(query["filter"])
        except ValueError as exc:
            return 400, error(400, str(exc), reason="invalid")
        listed = [(zone, res) for zone, res in listed if keep(res)]
    size = min(int(query.get("maxResults", "500")), 500)
    offset = (int(base64.urlsafe_b64decode(query["pageToken"]).decode())
              if "pageToken" in query else 0)
    items: dict[str, Any] = {}
    for zone, res in listed[offset : offset + size]:
        items.setdefault(f"zones/{zone}", {key: []})[key].append(res)
    for zone in sorted(unreachable) if offset == 0 else ():  # said once, on the first page
        items[f"zones/{zone}"] = {"warning": {
            "code": "UNREACHABLE", "message": f"zone {zone} is unreachable (fake)"}}
    out: dict[str, Any] = {"kind": kind, "items": items}
    if offset + size < len(listed):
        out["nextPageToken"] = base64.urlsafe_b64encode(str(offset + size).encode()).decode()
    return 200, out
