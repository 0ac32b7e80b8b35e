"""The one place where botocore errors become costguard errors.

Everything in this package that calls AWS does it inside `aws_call(scope)`, so nothing above
the provider ever sees a ClientError or an EndpointConnectionError.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from costguard.errors import InstanceNotFound, ProviderError, ProviderThrottled

THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestThrottled",
        "RequestThrottledException",
        "SlowDown",
        "PriorRequestNotComplete",
    }
)
_NOT_FOUND_CODES = frozenset({"InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"})
_DENIED_CODES = frozenset(
    {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthFailure"}
)


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def error_message(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Message", "")) or str(exc)


def translate(exc: Exception, scope: str) -> ProviderError:
    """A costguard error for `exc`, with a message that says what to do about it."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, ClientError):
        code, message = error_code(exc), error_message(exc)
        if code in THROTTLING_CODES:
            return ProviderThrottled(
                "aws", scope, f"throttled by AWS after retries ({code}); lower max_workers"
            )
        if code in _NOT_FOUND_CODES:
            return InstanceNotFound("aws", scope, f"{code}: {message}")
        if code in _DENIED_CODES:
            return ProviderError(
                "aws",
                scope,
                f"{code}: {message} — grant the permission "
                "(see `costguard iam --provider aws`) or check the role's trust policy",
            )
        return ProviderError("aws", scope, f"{code}: {message}", retryable=_is_server_side(exc))
    if isinstance(exc, EndpointConnectionError | ConnectTimeoutError | ReadTimeoutError):
        return ProviderError(
            "aws",
            scope,
            f"cannot reach the AWS endpoint ({exc}); check the region name, "
            "network egress or endpoint_url",
            retryable=True,
        )
    if isinstance(exc, NoCredentialsError):
        return ProviderError(
            "aws",
            scope,
            "no AWS credentials found: set AWS_PROFILE, AWS_ACCESS_KEY_ID/"
            "AWS_SECRET_ACCESS_KEY, or run where an instance/task role is available",
        )
    if isinstance(exc, BotoCoreError):
        return ProviderError("aws", scope, f"{type(exc).__name__}: {exc}")
    raise exc


def _is_server_side(exc: ClientError) -> bool:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return isinstance(status, int) and status >= 500


@contextmanager
def aws_call(scope: str) -> Iterator[None]:
    """Run AWS calls; re-raise their failures as `ProviderError` for `scope`."""
    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise translate(exc, scope) from exc
