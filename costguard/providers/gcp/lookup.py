"""Many named VMs or disks of one project in a few calls: `aggregatedList` with a name filter.

Compute's list filters take a regular expression that must match the whole field
(`name eq "(vm-1|vm-2)"`), so one call of a project's aggregatedList returns just the
wanted resources of every zone; names are split over several filters so that no request URL
grows past `FILTER_CHARS`. A name that is not a valid GCE name is never put in a filter (the
caller reads it one by one). A listing with an unreachable zone, or a call that fails,
yields None: the caller must not take "not listed" for "gone" then.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry

from costguard.providers.gcp import compute as compute_v1

# GCE resource names (RFC 1035): safe inside a regex alternation without escaping.
NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
# Characters of names per filter: keeps each GET well under URL length limits.
FILTER_CHARS = 4000
# the `fields` system parameter as a header: a partial response (inventory.py)
FIELD_MASK_HEADER = "x-goog-fieldmask"


def filterable(name: str | None) -> bool:
    return name is not None and NAME.fullmatch(name) is not None


def name_filters(names: Iterable[str], max_chars: int | None = None) -> list[str]:
    """`name eq "(a|b|...)"` filters covering `names` (deduplicated, sorted), each with at
    most `max_chars` (default FILTER_CHARS) characters of names."""
    max_chars = FILTER_CHARS if max_chars is None else max_chars
    out: list[str] = []
    chunk: list[str] = []
    size = 0
    for name in sorted(set(names)):
        if chunk and size + len(name) + 1 > max_chars:
            out.append(_filter(chunk))
            chunk, size = [], 0
        chunk.append(name)
        size += len(name) + 1
    if chunk:
        out.append(_filter(chunk))
    return out


def _filter(names: Sequence[str]) -> str:
    return f'name eq "({"|".join(names)})"'


def _scoped(page: Any, key: str) -> list[tuple[str, Any]] | None:
    """(zone, resource) of one aggregatedList page; None if any scope was unreachable."""
    if list(page.unreachables):
        return None
    found: list[tuple[str, Any]] = []
    for scope, scoped in page.items.items():
        warning: Any = scoped.warning  # compute_v1.Warning shadows the builtin
        if warning and warning.code == "UNREACHABLE":
            return None
        if scope.startswith("zones/"):
            found.extend((scope.removeprefix("zones/"), res) for res in getattr(scoped, key))
    return found


def _listed(pages: Callable[[], Iterable[Any]], key: str) -> list[tuple[str, Any]] | None:
    out: list[tuple[str, Any]] = []
    try:
        for page in pages():
            scoped = _scoped(page, key)
            if scoped is None:
                return None
            out.extend(scoped)
    except (gexc.GoogleAPICallError, gexc.RetryError):
        return None
    return out


def instances(client: compute_v1.InstancesClient, project: str, names: Iterable[str], *,
              page_size: int, retry: gretry.Retry, fields: str | None = None
              ) -> list[tuple[str, compute_v1.Instance]] | None:
    """(zone, VM) of every VM of `project` named in `names`, in any zone; one filtered
    aggregatedList per `name_filters` chunk (and page), as a partial response of `fields`
    when given (the X-Goog-FieldMask header). None: some could not be read."""
    out: list[tuple[str, compute_v1.Instance]] = []
    metadata = [(FIELD_MASK_HEADER, fields)] if fields else []
    for expr in name_filters(names):
        request = compute_v1.AggregatedListInstancesRequest(
            project=project, max_results=page_size, filter=expr)

        def pages(r: Any = request) -> Iterable[Any]:
            return client.aggregated_list(request=r, retry=retry, metadata=metadata).pages

        got = _listed(pages, "instances")
        if got is None:
            return None
        out.extend(got)
    return out


def disks(client: compute_v1.DisksClient, project: str, names: Iterable[str], *,
          page_size: int, retry: gretry.Retry) -> dict[tuple[str, str], compute_v1.Disk] | None:
    """The zonal disks of `project` named in `names`, by (zone, name). None: some could not
    be read."""
    out: dict[tuple[str, str], compute_v1.Disk] = {}
    for expr in name_filters(names):
        request = compute_v1.AggregatedListDisksRequest(
            project=project, max_results=page_size, filter=expr)

        def pages(r: Any = request) -> Iterable[Any]:
            return client.aggregated_list(request=r, retry=retry).pages

        got = _listed(pages, "disks")
        if got is None:
            return None
        out.update(((zone, d.name), d) for zone, d in got)
    return out
