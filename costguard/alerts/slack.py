"""Slack: Block Kit messages, and sending them by bot token (Web API) or incoming webhook.

With a bot token every message carries the delivery's dedupe key in its message metadata
(`event_type` costguard_alert), so after a crash between posting and recording, or an error
that may have come after Slack took the post (a timeout, a 5xx), the channel's history says
whether it arrived. An incoming webhook cannot be asked.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from costguard.alerts.content import AlertView
from costguard.alerts.errors import DeliveryError
from costguard.alerts.settings import SlackSettings, redact

if TYPE_CHECKING:  # slack_sdk is imported when a message is sent, not by every cycle
    from slack_sdk import WebClient
    from slack_sdk.errors import SlackApiError

METADATA_EVENT = "costguard_alert"
ACTION_PREFIX = "costguard_"
_SEVERITY_ICON = {"info": ":information_source:", "warning": ":warning:",
                  "critical": ":rotating_light:"}
# errors a retry cannot fix: the message goes to `failed` at once
_PERMANENT = {"channel_not_found", "not_in_channel", "is_archived", "invalid_auth",
              "account_inactive", "token_revoked", "no_permission", "missing_scope",
              "user_not_found", "invalid_blocks", "msg_too_long", "no_text"}


def quiet_logger() -> logging.Logger:
    # slack_sdk logs request URLs at DEBUG (a webhook URL is a secret): its clients log here,
    # at WARNING and above only, through costguard's handler and its redaction. (A logger
    # that did not propagate would reach Python's last-resort handler: unformatted, raw.)
    logger = logging.getLogger("costguard.alerts.slack_sdk")
    logger.setLevel(logging.WARNING)
    return logger


_CUT_ENTITY = re.compile(r"&[a-z]{0,3}$")


def _text(value: str, limit: int = 2900) -> str:
    """`value` within Block Kit's limit: cut with an ellipsis, never inside an escape
    (`&amp;` cut to `&am` would show as text)."""
    if len(value) <= limit:
        return value
    return _CUT_ENTITY.sub("", value[: limit - 1]) + "…"


def escape_mrkdwn(value: str) -> str:
    """Slack mrkdwn reads <...> as links and mentions (`<!channel>`, `<@U…>`): text that is
    not costguard's own is escaped, as Slack's formatting guide asks."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_esc = escape_mrkdwn


def action_value(view: AlertView, action: str, choice: str | None = None) -> str:
    value = {"a": action, "p": view.policy, "pr": view.provider, "i": view.instance_id}
    if choice is not None:
        value["for"] = choice
    return json.dumps(value, separators=(",", ":"))


def alert_blocks(view: AlertView) -> list[dict[str, Any]]:
    """Block Kit: what (header), why, the facts (instance, team, dollars, deadline), the
    evidence, and for idle warnings the snooze and stop-now buttons."""
    icon = _SEVERITY_ICON.get(view.severity, "")
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _text(view.subject, 150)}},
    ]
    if view.reason:
        blocks.append({"type": "section", "text": {
            "type": "mrkdwn", "text": _text(f"{icon} *Why:* {_esc(view.reason)}")}})
    fields = []
    if view.instance_id:
        kind = f" ({view.instance_type})" if view.instance_type else ""
        fields.append(f"*Instance*\n`{_esc(view.instance_id)}`{_esc(kind)}")
    fields.append(f"*Team*\n{_esc(view.team or 'unattributed')}")
    if view.owner:
        fields.append(f"*Owner*\n{_esc(view.owner)}")
    if view.dollars:
        fields.append(f"*Cost*\n{view.dollars}")
    if view.deadline_text:
        fields.append(f"*Deadline*\n{view.deadline_text}")
    if view.policy:
        fields.append(f"*Policy*\n{_esc(view.policy)}")
    blocks.append({"type": "section",
                   "fields": [{"type": "mrkdwn", "text": f} for f in fields[:10]]})
    if view.evidence:
        blocks.append({"type": "context", "elements": [
            {"type": "mrkdwn", "text": _text(f"*Evidence:* {_esc(view.evidence)}")}]})
    if view.details:
        blocks.append({"type": "section", "text": {"type": "mrkdwn",
                                                   "text": _text(_esc(view.details))}})
    if view.interactive:
        buttons: list[dict[str, Any]] = [
            {"type": "button", "action_id": f"{ACTION_PREFIX}snooze_{token}",
             "text": {"type": "plain_text", "text": label},
             "value": action_value(view, "snooze", token)}
            for token, label in view.snooze
        ]
        buttons.append({
            "type": "button", "action_id": f"{ACTION_PREFIX}stop_now", "style": "danger",
            "text": {"type": "plain_text", "text": "Stop now"},
            "value": action_value(view, "stop-now"),
            "confirm": {"title": {"type": "plain_text", "text": "Stop it now?"},
                        "text": {"type": "mrkdwn",
                                 "text": f"`{_esc(view.instance_id or '')}` stops at the "
                                         "next cycle if it is still idle."},
                        "confirm": {"type": "plain_text", "text": "Stop"},
                        "deny": {"type": "plain_text", "text": "Cancel"}}})
        blocks.append({"type": "actions", "block_id": "costguard_actions",
                       "elements": buttons})
        blocks.append({"type": "context", "elements": [
            {"type": "mrkdwn", "text": f"Or from a shell: `{_esc(view.snooze_command or '')}`"}]})
    return blocks


def digest_blocks(title: str, views: Sequence[AlertView]) -> list[dict[str, Any]]:
    lines = []
    for v in views[:40]:
        money = f" · {v.dollars}" if v.dollars else ""
        lines.append(f"• {_esc(v.subject)}{money}")
    if len(views) > 40:
        lines.append(f"… and {len(views) - 40} more")
    return [{"type": "header", "text": {"type": "plain_text", "text": _text(title, 150)}},
            {"type": "section", "text": {"type": "mrkdwn", "text": _text("\n".join(lines))}}]


def slack_message(view: AlertView, dedupe_key: str) -> dict[str, Any]:
    """The full payload, as posted (chat.postMessage arguments less `channel`)."""
    # the notification's text is mrkdwn too: a name holding <!channel> would ping everyone
    return {"text": _esc(view.subject), "blocks": alert_blocks(view),
            "metadata": {"event_type": METADATA_EVENT,
                         "event_payload": {"dedupe_key": dedupe_key}}}


class SlackSender:
    """Posts a message to one Slack destination; raises DeliveryError when it cannot."""

    def __init__(self, settings: SlackSettings, secrets: Sequence[str] = ()) -> None:
        self.settings = settings
        self._token = settings.token()
        self._webhook = settings.webhook()
        self._secrets = list(secrets)
        self._channel_ids: dict[str, str] | None = None

    @property
    def uses_webhook(self) -> bool:
        return self._token is None

    def _client(self) -> WebClient:
        from slack_sdk import WebClient

        assert self._token is not None
        base = self.settings.api_base_url
        return WebClient(token=self._token.get_secret_value(), base_url=base.rstrip("/") + "/",
                         timeout=int(self.settings.timeout_s), logger=quiet_logger(),
                         retry_handlers=[])

    def send(self, target: str, message: dict[str, Any]) -> str:
        """Post; returns the message's `ts` (Web API) or "webhook"."""
        if self._token is None:
            return self._send_webhook(message)
        from slack_sdk.errors import SlackApiError

        try:
            resp = self._client().chat_postMessage(channel=target, **message)
        except SlackApiError as exc:
            raise self._api_error(exc) from None
        except Exception as exc:  # connection refused, timeouts: try again later
            raise DeliveryError(self._clean(f"Slack unreachable: {exc}")) from None
        return str(resp.get("ts") or "")

    def _send_webhook(self, message: dict[str, Any]) -> str:
        if self._webhook is None:
            raise DeliveryError("Slack is not configured (no bot_token or webhook_url)",
                                permanent=True)
        from slack_sdk.webhook import WebhookClient

        client = WebhookClient(self._webhook.get_secret_value(),
                               timeout=int(self.settings.timeout_s), logger=quiet_logger(),
                               retry_handlers=[])
        try:
            resp = client.send(text=message["text"], blocks=message["blocks"])
        except Exception as exc:
            raise DeliveryError(self._clean(f"Slack webhook unreachable: {exc}")) from None
        if resp.status_code == 200:
            return "webhook"
        if resp.status_code == 429:
            raise DeliveryError("Slack rate limit (429)",
                                retry_after=_retry_after(resp.headers))
        permanent = resp.status_code in (400, 403, 404, 410)
        raise DeliveryError(self._clean(f"Slack webhook answered {resp.status_code}: "
                                        f"{resp.body[:200]}"), permanent=permanent)

    def _api_error(self, exc: SlackApiError) -> DeliveryError:
        resp = exc.response
        if resp.status_code == 429:
            return DeliveryError("Slack rate limit (429)", retry_after=_retry_after(resp.headers))
        code = resp.get("error") if isinstance(resp.data, dict) else None
        return DeliveryError(self._clean(f"Slack API error {resp.status_code}: {code or ''}"),
                             permanent=code in _PERMANENT)

    def _clean(self, text: str) -> str:
        return redact(text, self._secrets)

    # -- did it arrive? (recovery after a crash, retry after an ambiguous error) ----------
    def can_look_up(self, target: str) -> bool:
        """Whether this destination's history can say what was posted to it: only with a
        bot token, and not for `@name` (posting by name is resolved by Slack alone)."""
        return self._token is not None and not target.startswith("@")

    def find_sent(self, target: str, dedupe_key: str, since: datetime) -> str | None:
        """The `ts` of a message this delivery already posted, if the history since `since`
        (less a minute for clock skew) shows one; DeliveryError when Slack cannot tell now
        (permanent: it never can, e.g. a webhook, `@name`, or a missing history scope)."""
        if not self.can_look_up(target):
            raise DeliveryError(f"Slack cannot be asked what was posted to {target} "
                                "(webhook, or a destination given by @name)", permanent=True)
        from slack_sdk.errors import SlackApiError

        client = self._client()
        try:
            channel = self._channel_id(client, target)
            if channel is None:
                return None
            cursor: str | None = None
            while True:
                resp = client.conversations_history(
                    channel=channel, oldest=f"{since.timestamp() - 60:.6f}",
                    include_all_metadata=True, limit=200, cursor=cursor)
                for msg in resp.get("messages") or []:
                    meta = msg.get("metadata") or {}
                    payload = meta.get("event_payload") or {}
                    if (meta.get("event_type") == METADATA_EVENT
                            and payload.get("dedupe_key") == dedupe_key):
                        return str(msg.get("ts"))
                cursor = (resp.get("response_metadata") or {}).get("next_cursor") or None
                if not cursor:
                    return None
        except SlackApiError as exc:
            raise self._api_error(exc) from None
        except Exception as exc:
            raise DeliveryError(self._clean(f"Slack unreachable: {exc}")) from None

    def _channel_id(self, client: WebClient, target: str) -> str | None:
        if target[0] in "UW":  # a user: the bot's DM with them
            resp = client.conversations_open(users=target)
            return str((resp.get("channel") or {}).get("id") or "") or None
        if not target.startswith("#"):
            return target
        if self._channel_ids is None:
            self._channel_ids = {}
            cursor: str | None = None
            while True:
                resp = client.conversations_list(types="public_channel,private_channel",
                                                 exclude_archived=True, limit=1000,
                                                 cursor=cursor)
                for ch in resp.get("channels") or []:
                    self._channel_ids[f"#{ch.get('name')}"] = str(ch.get("id"))
                cursor = (resp.get("response_metadata") or {}).get("next_cursor") or None
                if not cursor:
                    break
        return self._channel_ids.get(target)


def _retry_after(headers: Any) -> float:
    for key in ("Retry-After", "retry-after"):
        value = headers.get(key) if headers else None
        if isinstance(value, list):
            value = value[0] if value else None
        if value is not None:
            try:
                return max(float(value), 1.0)
            except ValueError:
                break
    return 30.0
