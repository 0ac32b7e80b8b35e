"""google-api-core errors become costguard errors here, and nowhere else.

The messages say what to do: enable the API, grant the role, check the project id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from google.api_core import exceptions as gexc

from costguard.errors import InstanceNotFound, ProviderError, ProviderThrottled

if TYPE_CHECKING:
    from costguard.model import Instance

T = TypeVar("T")

ROLE_FILE = "deploy/iam/gcp/costguard-role.yaml"

_DISABLED_REASONS = {"SERVICE_DISABLED", "accessNotConfigured"}


def _reasons(exc: gexc.GoogleAPICallError) -> set[str]:
    reasons = {str(e.get("reason")) for e in exc.errors if isinstance(e, dict)}
    if exc.reason:
        reasons.add(str(exc.reason))
    return reasons


def service_disabled(exc: gexc.GoogleAPICallError) -> bool:
    """A 403 that says the API is switched off in the project."""
    return isinstance(exc, gexc.Forbidden | gexc.PermissionDenied) and bool(
        _reasons(exc) & _DISABLED_REASONS)


def explain(exc: gexc.GoogleAPICallError, scope: str, api: str = "compute.googleapis.com") -> str:
    """One line that says what went wrong in `scope` and how to fix it."""
    project = scope.split("/", 1)[0]
    detail = exc.message or type(exc).__name__
    if isinstance(exc, gexc.Forbidden | gexc.PermissionDenied):
        if service_disabled(exc):
            return (
                f"the {api} API is disabled in project {project}: enable it with "
                f"`gcloud services enable {api} --project {project}` ({detail})"
            )
        return (
            f"permission denied in project {project}: grant costguard's service account the "
            f"custom role in {ROLE_FILE} on this project ({detail})"
        )
    if isinstance(exc, gexc.NotFound):
        return (
            f"{scope} not found: check the project id in providers.gcp, or the instance "
            f"was deleted meanwhile ({detail})"
        )
    if isinstance(exc, gexc.Unauthenticated):
        return (
            "not authenticated: run `gcloud auth application-default login`, or attach a "
            f"service account / workload identity to costguard ({detail})"
        )
    if isinstance(exc, gexc.TooManyRequests | gexc.ResourceExhausted):
        return f"throttled by {api} after retries; try again next cycle ({detail})"
    return f"{type(exc).__name__}: {detail}"


def translate(
    exc: gexc.GoogleAPICallError, scope: str, api: str = "compute.googleapis.com"
) -> ProviderError:
    message = explain(exc, scope, api)
    if isinstance(exc, gexc.TooManyRequests | gexc.ResourceExhausted):
        return ProviderThrottled("gcp", scope, message)
    if isinstance(exc, gexc.NotFound):
        return InstanceNotFound("gcp", scope, message)
    retryable = isinstance(exc, gexc.ServiceUnavailable | gexc.InternalServerError)
    return ProviderError("gcp", scope, message, retryable=retryable)


def from_retry_error(
    exc: gexc.RetryError, scope: str, api: str = "compute.googleapis.com"
) -> ProviderError:
    """Retries ran out: report the last error the service gave, as `translate` would."""
    cause = exc.cause
    if isinstance(cause, gexc.GoogleAPICallError):
        last = translate(cause, scope, api)
        return type(last)("gcp", scope, f"gave up after retries: {explain(cause, scope, api)}")
    return ProviderError("gcp", scope, f"gave up after retries: {cause or exc}", retryable=True)


def vm_scope(instance: Instance) -> str:
    """How an error names the VM it is about: project/zone/name."""
    return f"{instance.account}/{instance.zone}/{instance.name}"


def for_vm(instance: Instance, fn: Callable[[], T], api: str = "compute.googleapis.com") -> T:
    """`fn()`, one call about `instance` (to Compute, or the Cloud TPU API for a TPU node),
    with the client library's errors translated at this boundary."""
    try:
        return fn()
    except gexc.GoogleAPICallError as exc:
        raise translate(exc, vm_scope(instance), api) from exc
    except gexc.RetryError as exc:
        raise from_retry_error(exc, vm_scope(instance), api) from exc
