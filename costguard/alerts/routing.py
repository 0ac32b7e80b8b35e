"""Who gets an alert: the routing file, validated with FILE:LINE:COL errors, and its resolution.

An alert already names recipients (`email:ana@example.com`, `slack:@ana`, `team:research`,
`slack:#chan`, `unattributed`, `unowned`). The routing file says what those mean (a team's
channel and mailing list, an owner's Slack user) and adds recipients by kind, severity, team
or policy. Anything that resolves to nobody goes to `fallback`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from costguard.alerts.addresses import owner_recipient
from costguard.errors import CostguardError, SourceError
from costguard.small_files import read_small_text
from costguard.store.tables import AlertRow
from costguard.yamlpos import (
    YamlLoadError,
    load_yaml_with_positions,
    validation_errors_to_source_errors,
)

Severity = Literal["info", "warning", "critical"]
SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}
MAX_ROUTING_BYTES = 2**20  # a routing file of hundreds of teams is tens of KiB
Channel = Literal["console", "slack", "email"]

_SLACK_TARGET = re.compile(r"#[a-z0-9][a-z0-9._-]*|@[\w.-]+|[UCGWD][A-Z0-9]{6,}")
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
_RECIPIENT = re.compile(r"owner|team|team:[\w.-]+|slack:\S+|email:\S+")


class RoutingError(CostguardError, ValueError):
    """The routing file is invalid; `errors` holds every problem, located to the character."""

    def __init__(self, errors: Sequence[SourceError]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(str(e) for e in self.errors))


def _list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def _slack_target(value: str) -> str:
    if not _SLACK_TARGET.fullmatch(value):
        raise ValueError(f"invalid Slack destination {value!r} (use #channel, a user or "
                         "channel id like U0123ABCD, or @name)")
    return value


def _email(value: str) -> str:
    if not _EMAIL.fullmatch(value):
        raise ValueError(f"invalid email address {value!r} (use name@example.com)")
    return value


def check_recipient(value: str) -> str:
    ok = _RECIPIENT.fullmatch(value) is not None
    if ok and value.startswith("slack:"):
        ok = _SLACK_TARGET.fullmatch(value[6:]) is not None
    if ok and value.startswith("email:"):
        ok = _EMAIL.fullmatch(value[6:]) is not None
    if not ok:
        raise ValueError(f"invalid recipient {value!r} (use owner, team, team:NAME, "
                         "slack:#channel, slack:U0123ABCD or email:name@example.com)")
    return value


SlackTarget = Annotated[str, AfterValidator(_slack_target)]
Email = Annotated[str, AfterValidator(_email)]
Recipient = Annotated[str, AfterValidator(check_recipient)]
Many = BeforeValidator(_list)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Contact(_Strict):
    """Where a team or an owner is reached: a Slack channel or user, and/or addresses."""

    slack: SlackTarget | None = None
    email: Annotated[list[Email], Many] = Field(default_factory=list)


class Match(_Strict):
    """Every key given must hold; an empty match takes every alert."""

    kind: Annotated[list[str], Many] | None = None
    min_severity: Severity | None = None
    team: Annotated[list[str], Many] | None = None
    unattributed: bool | None = None  # true: only alerts with no team
    policy: Annotated[list[str], Many] | None = None
    provider: Annotated[list[str], Many] | None = None

    def holds(self, alert: AlertRow) -> bool:
        if self.kind is not None and alert.kind not in self.kind:
            return False
        if self.min_severity is not None and SEVERITY_RANK.get(
                alert.severity, 0) < SEVERITY_RANK[self.min_severity]:
            return False
        if self.team is not None and alert.team not in self.team:
            return False
        if self.unattributed is not None and (alert.team is None) != self.unattributed:
            return False
        if self.policy is not None and alert.policy not in self.policy:
            return False
        return self.provider is None or alert.provider in self.provider


class Route(_Strict):
    match: Match = Field(default_factory=Match)
    to: Annotated[list[Recipient], Many] = Field(default_factory=list)
    digest: bool = False  # matching alerts wait for the daily digest
    stop: bool = False  # later routes are not considered


class RoutingFile(_Strict):
    teams: dict[str, Contact] = Field(default_factory=dict)
    owners: dict[str, Contact] = Field(default_factory=dict)
    routes: list[Route] = Field(default_factory=list)
    fallback: Annotated[list[Recipient], Many] = Field(default_factory=list)


EXAMPLE = """\
teams:
  research: {slack: "#research-gpu", email: [research-leads@example.com]}
owners:
  ana: {slack: U0123ABCD, email: ana@example.com}
routes:
  - match: {kind: [idle-warning, action], team: research}
    to: [team, owner]
  - match: {min_severity: critical}
    to: ["slack:#finops", "email:finops@example.com"]
  - match: {kind: finding, min_severity: info}
    digest: true
fallback: ["slack:#finops"]
"""


def load_routing(path: Path) -> RoutingFile:
    """Read and validate a routing file; every problem is reported as FILE:LINE:COL."""
    try:
        text = read_small_text(path, MAX_ROUTING_BYTES)
    except OSError as exc:
        raise RoutingError([SourceError(str(path), 1, 1, f"cannot read routing file: "
                                        f"{exc.strerror}; check alerts.routing_file")]) from None
    except UnicodeDecodeError as exc:
        raise RoutingError([SourceError(str(path), 1, 1, f"not UTF-8 text ({exc.reason} at "
                                        f"byte {exc.start}); save it as UTF-8")]) from None
    return parse_routing(text, str(path))


def parse_routing(text: str, filename: str) -> RoutingFile:
    try:
        data, positions = load_yaml_with_positions(text, filename)
    except YamlLoadError as exc:
        raise RoutingError([exc.error]) from None
    if data is None:
        return RoutingFile()
    try:
        return RoutingFile.model_validate(data)
    except ValidationError as exc:
        raise RoutingError(validation_errors_to_source_errors(
            exc, positions, filename, RoutingFile)) from None


def is_sample(alert: AlertRow) -> bool:
    """`costguard alerts test` samples go to the named recipient only."""
    return bool((alert.context or {}).get("sample"))


@dataclass(frozen=True)
class Target:
    channel: Channel
    address: str  # #chan, U0123, @name, a@b.c, log

    def __str__(self) -> str:
        return f"{self.channel}:{self.address}"


@dataclass(frozen=True)
class Resolution:
    targets: tuple[Target, ...]
    digest: bool


def _contact_targets(contact: Contact) -> list[Target]:
    out = [Target("slack", contact.slack)] if contact.slack else []
    return out + [Target("email", a) for a in contact.email]


class Router:
    """Resolves an alert to concrete targets with a routing file (or none)."""

    def __init__(self, routing: RoutingFile | None = None,
                 default_channel: str | None = None) -> None:
        self.routing = routing or RoutingFile()
        self.default_channel = default_channel

    def resolve(self, alert: AlertRow) -> Resolution:
        tokens = list(alert.recipients)
        digest = False
        explicit_only = is_sample(alert)
        if not explicit_only:
            for route in self.routing.routes:
                if route.match.holds(alert):
                    tokens += route.to
                    digest = digest or route.digest
                    if route.stop:
                        break
        targets: list[Target] = []
        unresolved = not tokens
        for token in tokens:
            found = self._token(token, alert)
            unresolved = unresolved or not found
            targets += found
        if unresolved and not explicit_only:
            targets += self._fallback(alert)
        return Resolution(tuple(dict.fromkeys(targets)), digest)

    def _fallback(self, alert: AlertRow) -> list[Target]:
        out: list[Target] = []
        for token in self.routing.fallback:
            out += self._token(token, alert)
        if not out and self.default_channel:
            out.append(Target("slack", self.default_channel))
        return out

    def _token(self, token: str, alert: AlertRow) -> list[Target]:
        if token == "team":
            return self._token(f"team:{alert.team}", alert) if alert.team else []
        if token == "owner":
            return self._owner(alert.owner, alert) if alert.owner else []
        if token.startswith("team:"):
            contact = self.routing.teams.get(token[5:])
            return _contact_targets(contact) if contact else []
        if token.startswith("slack:@"):
            contact = self.routing.owners.get(token[7:])
            if contact is not None and contact.slack:
                return [Target("slack", contact.slack)]
            return [Target("slack", token[6:])]
        if token.startswith("slack:"):
            return [Target("slack", token[6:])]
        if token.startswith("email:"):
            contact = self.routing.owners.get(token[6:])
            return _contact_targets(contact) if contact else [Target("email", token[6:])]
        if token == "unowned" and alert.owner:
            # an owner tag that is no address or name (docs/alerts.md) may still have an entry
            contact = self.routing.owners.get(alert.owner)
            return _contact_targets(contact) if contact else []
        return []  # unattributed, unowned: nobody named, the fallback takes it

    def _owner(self, owner: str, alert: AlertRow) -> list[Target]:
        contact = self.routing.owners.get(owner)
        if contact is not None:
            return _contact_targets(contact)
        recipient = owner_recipient(owner)  # an address, a name, or nobody costguard can reach
        return [] if recipient == "unowned" else self._token(recipient, alert)
