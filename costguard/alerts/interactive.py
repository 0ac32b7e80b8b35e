"""Slack button clicks: a Starlette route that verifies them and hands them on.

Slack signs every interactive request with the app's signing secret: `v0=HMAC-SHA256(secret,
"v0:{timestamp}:{body}")` in `X-Slack-Signature`, the time in `X-Slack-Request-Timestamp`.
A forged signature or a timestamp more than five minutes off gets 401 and changes nothing;
so do missing or malformed signature headers (before the body is read) and a signature
already accepted (a replay). Bodies are capped while they stream.
A verified click is applied (`journal_actions`), answered at once, and then the original
message is updated through the click's `response_url` to say who did what (`slack_update`).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pydantic import SecretStr
from slack_sdk.signature import Clock as SlackClock
from slack_sdk.signature import SignatureVerifier
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from costguard.alerts.content import snooze_until
from costguard.alerts.slack import ACTION_PREFIX
from costguard.alerts.slack_update import outcome_line, post_update, updated_message
from costguard.alerts.snooze import NothingToSnooze, request_stop, snooze_instance
from costguard.clock import Clock
from costguard.daemon.bodies import BodyTooLarge, parse_json, read_limited
from costguard.store.db import Database

log = logging.getLogger("costguard.alerts.slack")

ACTIONS_PATH = "/slack/actions"
MAX_BODY_BYTES = 256 * 1024  # a click with its message's blocks is a few KiB
REPLAY_WINDOW_S = 5 * 60  # what SignatureVerifier accepts either side of its clock
_TIMESTAMP = re.compile(r"\d{1,12}")
_SIGNATURE = re.compile(r"v0=[0-9a-f]{64}")


@dataclass(frozen=True)
class SlackAction:
    """One verified button click."""

    action: str  # snooze | stop-now
    policy: str
    provider: str
    instance_id: str
    choice: str | None  # for snooze: 1h, 4h, tomorrow, or a duration
    user_id: str
    user_name: str
    via: str = "slack"  # or "console": the daemon's web pages ask the same

    @property
    def who(self) -> str:
        if self.via != "slack":
            return f"{self.via} user {self.user_name}"
        return f"slack user {self.user_name} ({self.user_id})"

    @property
    def where(self) -> str:
        return "Slack" if self.via == "slack" else f"the {self.via}"


@dataclass(frozen=True)
class ActionReply:
    """What a click did, for the clicker and for the updated message. `final`: nothing is
    left to choose (the instance will be stopped), so the buttons go."""

    text: str
    final: bool = False


OnAction = Callable[[SlackAction], "str | ActionReply"]


def parse_actions(payload: dict[str, Any]) -> list[SlackAction]:
    """The costguard buttons in a `block_actions` payload; ValueError if it is not one."""
    if not isinstance(payload, dict) or payload.get("type") != "block_actions":
        kind = payload.get("type") if isinstance(payload, dict) else type(payload).__name__
        raise ValueError(f"unsupported interaction type {kind!r}")
    user = payload.get("user") or {}
    user_id = str(user.get("id") or "") if isinstance(user, dict) else ""
    if not user_id:
        raise ValueError("interaction without a user")
    user_name = str(user.get("username") or user.get("name") or user_id)
    actions = payload.get("actions") or []
    if not isinstance(actions, list) or not all(isinstance(a, dict) for a in actions):
        raise ValueError("`actions` is not a list of objects")
    out = []
    for action in actions:
        if not str(action.get("action_id", "")).startswith(ACTION_PREFIX):
            continue
        raw = action.get("value") or "{}"
        value = parse_json(raw) if isinstance(raw, str) else None
        if not isinstance(value, dict):
            raise ValueError(f"malformed costguard action value {raw!r}")
        kind = value.get("a")
        if kind not in ("snooze", "stop-now") or not all(
                isinstance(value.get(k), str) and value.get(k) for k in ("p", "pr", "i")):
            raise ValueError(f"malformed costguard action value {action.get('value')!r}")
        choice = value.get("for")
        if choice is not None and not isinstance(choice, str):
            raise ValueError(f"malformed snooze choice {choice!r}")
        out.append(SlackAction(action=kind, policy=value["p"], provider=value["pr"],
                               instance_id=value["i"], choice=choice,
                               user_id=user_id, user_name=user_name))
    return out


class ReplayCache:
    """Signatures already accepted within Slack's five-minute window: a signed request
    captured on the way and sent again is refused, not applied twice. Kept in memory per
    process (a replay to another replica is still bounded by the window and by the journal:
    a second "stop now" changes nothing a first one did not)."""

    def __init__(self, clock: SlackClock, window_s: int = REPLAY_WINDOW_S) -> None:
        self.clock = clock
        self.window_s = window_s
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()

    def first(self, signature: str, stamp: int) -> bool:
        """True the first time `signature` is presented; False for a replay."""
        now = int(self.clock.now())
        with self._lock:
            if len(self._seen) > 1000:  # forget what the window no longer accepts anyway
                self._seen = {k: t for k, t in self._seen.items()
                              if now - t <= self.window_s}
            if signature in self._seen:
                return False
            self._seen[signature] = stamp
            return True


# where Slack's response URLs point (slack.com and GovSlack): a click's message is updated
# there and nowhere else, so a signed payload cannot send the daemon's post elsewhere
SLACK_RESPONSE_URLS = ("https://hooks.slack.com/", "https://hooks.slack-gov.com/")


def response_url_taken(url: str, prefixes: Sequence[str]) -> bool:
    """`url` is under one of `prefixes` (each a scheme, host and path ending in `/`)."""
    return any(url.startswith(prefix) for prefix in prefixes)


def slack_routes(signing_secret: str | SecretStr, on_action: OnAction, *,
                 path: str = ACTIONS_PATH, clock: SlackClock | None = None,
                 max_body_bytes: int = MAX_BODY_BYTES,
                 response_urls: Sequence[str] = SLACK_RESPONSE_URLS) -> list[Route]:
    """The interactivity endpoint to mount on the daemon's HTTP app (set its public URL as
    the Slack app's Interactivity Request URL).

    Fails small: a request without well-formed signature headers is refused before its
    body is read; the body is read within `max_body_bytes` while it streams (413 past it),
    then verified; a signature already accepted is refused (replay). The click's message is
    updated only where `response_urls` point (Slack's hooks; a URL elsewhere is logged by
    its host and left alone, the click still applied)."""
    secret = (signing_secret.get_secret_value() if isinstance(signing_secret, SecretStr)
              else signing_secret)
    if not secret:
        raise ValueError("slack_routes needs the Slack app's signing secret")
    slack_clock = clock or SlackClock()
    verifier = SignatureVerifier(secret, clock=slack_clock)
    seen = ReplayCache(slack_clock)

    def refused(why: str, request: Request) -> JSONResponse:
        log.warning("Slack interaction refused: %s (from %s)", why,
                    request.client.host if request.client else "?")
        return JSONResponse({"error": why}, status_code=401)

    async def actions(request: Request) -> Response:
        # the headers first: nothing is read of a request that cannot be Slack's
        stamp = request.headers.get("x-slack-request-timestamp", "")
        signature = request.headers.get("x-slack-signature", "")
        if not _TIMESTAMP.fullmatch(stamp) or not _SIGNATURE.fullmatch(signature):
            return refused("missing or malformed signature headers", request)
        try:
            body = await read_limited(request, max_body_bytes)
        except BodyTooLarge:
            return JSONResponse({"error": f"body over {max_body_bytes} bytes"},
                                status_code=413)
        except ClientDisconnect:
            return JSONResponse({"error": "client disconnected"}, status_code=400)
        try:  # Slack sends UTF-8 form data; the verifier raises on anything else
            body.decode("utf-8")
        except UnicodeDecodeError:
            return JSONResponse({"error": "bad payload: not UTF-8"}, status_code=400)
        if not verifier.is_valid(body, stamp, signature):
            return refused("invalid or stale signature", request)
        if not seen.first(signature, int(stamp)):
            return refused("replayed request: this signed click was already applied", request)
        try:
            raw = parse_qs(body.decode("utf-8")).get("payload", [""])[0]
            payload = parse_json(raw)
            clicks = parse_actions(payload)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            return JSONResponse({"error": f"bad payload: {exc}"}, status_code=400)
        replies = [_reply(await run_in_threadpool(on_action, click)) for click in clicks]
        texts = [r.text for r in replies]
        response_url = payload.get("response_url")
        task = None
        if not isinstance(response_url, str):
            response_url = None
        elif response_url and not response_url_taken(response_url, response_urls):
            # the host only: the path is the click's secret
            log.warning("a Slack click's response_url is not Slack's (%s): its message is not "
                        "updated", urlsplit(response_url).hostname or "?")
            response_url = None
        if clicks and response_url:
            lines = [outcome_line(c.action, c.user_id, r.text)
                     for c, r in zip(clicks, replies, strict=True)]
            update = updated_message(payload.get("message"), lines,
                                     final=any(r.final for r in replies))
            # after the answer: Slack wants one within 3 seconds
            task = BackgroundTask(post_update, response_url, update)
        return JSONResponse({"ok": True, "text": " ".join(texts)}, background=task)

    return [Route(path, actions, methods=["POST"])]


def _reply(value: str | ActionReply) -> ActionReply:
    return value if isinstance(value, ActionReply) else ActionReply(value)


def journal_actions(db: Database, clock: Clock, max_snooze: timedelta) -> OnAction:
    """The standard `on_action`: snoozes set `snooze_until` (capped); "stop now" makes the
    instance due at the next cycle (deadline now, any snooze ended); both are journaled
    with the Slack user who clicked."""

    def on_action(click: SlackAction) -> ActionReply:
        now = clock.now()
        final = False
        try:
            with db.session() as s:
                if click.action == "snooze":
                    # asked for, uncapped: snooze_instance caps it and says so in the journal
                    until = snooze_until(click.choice or "1h", now, timedelta(days=3650))
                    end, _ = snooze_instance(
                        s, instance_id=click.instance_id, provider=click.provider,
                        policy=click.policy, until=until, now=now, who=click.who,
                        reason=f"snooze button in {click.where}", max_snooze=max_snooze)
                    text = f"{click.instance_id} snoozed until {end:%Y-%m-%d %H:%M} UTC"
                else:
                    warned = request_stop(s, instance_id=click.instance_id,
                                          provider=click.provider, policy=click.policy,
                                          now=now, who=click.who)
                    text = (f"asked to stop {click.instance_id} now: it stops at the next cycle "
                            "if still idle" if warned else f"{click.instance_id} is no longer "
                            "pending a stop; nothing to do")
                    final = warned
        except NothingToSnooze as exc:
            return ActionReply(str(exc))
        except ValueError as exc:
            return ActionReply(f"cannot snooze: {exc}")
        log.info("%s: %s", click.who, text)
        return ActionReply(text, final)

    return on_action
