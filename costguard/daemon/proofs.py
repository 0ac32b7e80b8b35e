"""What every instance-identity verifier shares: what a proof establishes (`Proven`), why
one is refused (`ProofRefused`, a 403; `KeysUnavailable`, a 503) and the clock skew allowed.
The verifiers: `aws_identity` (EC2 documents in their three signed forms) and
`google_tokens` (GCE identity tokens); `identity` trades a proof for a credential."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from costguard.clock import utc
from costguard.errors import ConfigError, CostguardError

CLOCK_SKEW = timedelta(minutes=5)


class ProofRefused(CostguardError, PermissionError):
    """The identity proof does not hold (403)."""


class KeysUnavailable(CostguardError):
    """Google's keys could not be had right now (503: the agent tries again)."""


class IdentitySettingError(ConfigError):
    """A file or folder `http.identity` names cannot serve: the daemon does not start
    (every proof would be refused, and nothing would say why until an agent tried)."""


@dataclass(frozen=True)
class Proven:
    """What a verified proof says of the instance that sent it."""

    provider: str
    instance_id: str
    region: str | None = None
    launched: datetime | None = None  # AWS pendingTime
    form: str = ""  # signature | rsa2048 | pkcs7 | gce-token
    verified_by: str = ""  # the certificate file or key id that verified it
    account: str | None = None  # AWS account id, or GCP project id
    zone: str | None = None
    signed_at: datetime | None = None  # CMS signingTime, or the token's iat


def timestamp(text: object, field: str) -> datetime:
    """An ISO 8601 time from a proof, in UTC; ProofRefused naming `field` when it is not one
    or lies outside what arithmetic on it can reach (year 1 or 9999 with an offset)."""
    if not isinstance(text, str) or len(text) > 40:
        raise ProofRefused(f"{field} is not an ISO 8601 time")
    try:
        value = utc(datetime.fromisoformat(text))  # "Z" read since 3.11
    except (ValueError, OverflowError):
        value = None
    if value is None or not _EARLIEST <= value <= _LATEST:
        raise ProofRefused(f"{field} {text!r} is not a time a proof can carry "
                           "(ISO 8601, years 2 to 9998)")
    return value


_EARLIEST = datetime(2, 1, 1, tzinfo=UTC)
_LATEST = datetime(9998, 12, 31, tzinfo=UTC)
