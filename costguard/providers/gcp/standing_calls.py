"""The shapes every GCP standing resource's calls share (gcp/volumes.py, snapshots.py,
addresses.py): a project's listing that fails as a gap, an item GCE answered that costguard
cannot read left out, an operation waited on until DONE, a delete and a relabel with their
outcomes. Each resource's module says only its own calls.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from google.api_core import exceptions as gexc

from costguard.errors import ProviderError
from costguard.model import ActionOutcome, ActionResult, Gap
from costguard.providers.gcp import compute as compute_v1
from costguard.providers.gcp.actions import label_diff, op_error, wanted_labels
from costguard.providers.gcp.errors import explain, from_retry_error
from costguard.standing.model import Standing, StandingList

log = logging.getLogger(__name__)


def listed(project: str, read: Callable[[], StandingList]) -> StandingList:
    """`read()`, or one gap for the project when a call failed: a half-read project is
    reported as a gap, never as fewer resources."""
    try:
        return read()
    except gexc.GoogleAPICallError as exc:
        return StandingList(gaps=[Gap(provider="gcp", scope=project,
                                      error=explain(exc, project))])
    except gexc.RetryError as exc:
        return StandingList(gaps=[Gap(provider="gcp", scope=project,
                                      error=str(from_retry_error(exc, project)))])


def parsed(project: str, what: str, raws: Iterable[Any],
           parse: Callable[[Any], Standing]) -> list[Standing]:
    """Each raw item parsed; one costguard cannot read is left out and logged."""
    out = []
    for raw in raws:
        try:
            out.append(parse(raw))
        except (ValueError, TypeError, OverflowError) as exc:  # ValidationError too
            log.warning("%s: %s %s left out, not readable (%s)", project, what,
                        str(raw.name)[:64], type(exc).__name__)
    return out


def wait_done(op: compute_v1.Operation, again: Callable[[str], compute_v1.Operation],
              scope: str, timeout_s: float) -> compute_v1.Operation:
    """`op` once DONE, asking `again(name)` (a zone's, region's or global operations.wait,
    which blocks server-side up to about two minutes) until then."""
    deadline = time.monotonic() + timeout_s
    while op.status != compute_v1.Operation.Status.DONE:
        if time.monotonic() > deadline:
            raise ProviderError("gcp", scope,
                                f"operation {op.name} not done after {timeout_s:.0f} s",
                                retryable=True)
        op = again(op.name)
    return op


def removed(item: Standing, verb: str, call: Callable[[], compute_v1.Operation], *,
            dry_run: bool) -> ActionResult:
    """Delete (or release) `item` with `call()` (the request, its operation waited on)."""
    if dry_run:
        return ActionResult(outcome=ActionOutcome.DRY_RUN,
                            detail=f"would be {verb} (GCP has no dry run: {item.kind} "
                                   f"{item.name} was read, nothing called)")
    try:
        op = call()
    except gexc.NotFound:
        return ActionResult(outcome=ActionOutcome.SKIPPED, detail="gone meanwhile")
    except gexc.GoogleAPICallError as exc:  # a 400: in use by a VM, a forwarding rule
        return ActionResult(outcome=ActionOutcome.FAILED, detail=explain(exc, item.account))
    error = op_error(op)
    return ActionResult(outcome=ActionOutcome.FAILED if error else ActionOutcome.DONE,
                        detail=error or verb)


def relabelled(item: Standing, tags: Mapping[str, str], read: Callable[[], Any],
               write: Callable[[str, dict[str, str]], compute_v1.Operation], *,
               dry_run: bool) -> ActionResult:
    """Merge `tags` into the labels `read()` answers (a raw resource with `labels` and
    `label_fingerprint`), written by `write(fingerprint, labels)` (its operation waited
    on). A 412 (relabelled meanwhile) fails this time; the next cycle reads again."""
    try:
        raw = read()
    except gexc.NotFound:
        return ActionResult(outcome=ActionOutcome.SKIPPED, detail="gone meanwhile")
    except gexc.GoogleAPICallError as exc:
        return ActionResult(outcome=ActionOutcome.FAILED, detail=explain(exc, item.account))
    current = dict(raw.labels)
    wanted = wanted_labels(current, tags, ())
    said = f"labels of {item.name}: {label_diff(current, wanted)}"
    if wanted == current or dry_run:
        return ActionResult(outcome=ActionOutcome.DRY_RUN if dry_run else ActionOutcome.DONE,
                            detail=("would set " if dry_run else "") + said)
    try:
        op = write(raw.label_fingerprint, wanted)
    except gexc.GoogleAPICallError as exc:
        return ActionResult(outcome=ActionOutcome.FAILED, detail=explain(exc, item.account))
    error = op_error(op)
    return ActionResult(outcome=ActionOutcome.FAILED if error else ActionOutcome.DONE,
                        detail=error or said)
