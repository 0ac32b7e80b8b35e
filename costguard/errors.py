"""One hierarchy of costguard errors. Each message says what went wrong and how to fix it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class CostguardError(Exception):
    """Base of every error costguard raises on purpose."""


class ConfigError(CostguardError, ValueError):
    """The configuration (costguard.yaml or COSTGUARD_* variables) is wrong. `located` holds
    the problems found in a file, at FILE:LINE:COL; `others` the rest (a variable's value),
    one line each; both empty where the message is the one problem."""

    def __init__(self, message: str, located: Sequence[SourceError] = (),
                 others: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.located = list(located)
        self.others = list(others)


@dataclass(frozen=True)
class SourceError:
    """One problem in a user-written file, located to the character."""

    file: str
    line: int
    column: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}: {self.message}"


class PolicyError(CostguardError, ValueError):
    """One or more policy files are invalid; `errors` holds every problem found."""

    def __init__(self, errors: Sequence[SourceError]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(str(e) for e in self.errors))


class ProviderError(CostguardError):
    """A cloud call failed. Raised by providers instead of SDK errors."""

    def __init__(self, provider: str, scope: str, message: str, *, retryable: bool = False):
        self.provider = provider
        self.scope = scope
        self.retryable = retryable
        super().__init__(f"{provider} {scope}: {message}")


class ProviderThrottled(ProviderError):
    """The cloud asked us to slow down and retries were exhausted."""

    def __init__(self, provider: str, scope: str, message: str) -> None:
        super().__init__(provider, scope, message, retryable=True)


class InstanceNotFound(ProviderError, LookupError):
    """The instance no longer exists at the provider."""


class StoreError(CostguardError):
    """The database cannot be used as configured."""


class StoreUnopenable(StoreError):
    """The database cannot be opened or migrated at all (`why`: the driver's words): where
    it is the configured one, the message says to check database_url; a command that chose
    the store itself (the demo's) says so in its own words."""

    def __init__(self, message: str, why: str) -> None:
        super().__init__(message)
        self.why = why
