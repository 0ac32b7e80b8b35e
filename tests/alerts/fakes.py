"""Real receivers on 127.0.0.1 for the alert tests: a Slack stand-in (incoming webhook and the
Web API methods costguard calls; an ASGI app, served with tests/fakes/loopback.py), and an SMTP
server (aiosmtpd) with STARTTLS or implicit TLS and AUTH, using a throwaway self-signed
certificate."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import ssl
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

WEBHOOK_PATH = "/services/T0000/B0000/hooksecretXYZ123"
BOT_TOKEN = "xoxb-test-bot-token-SECRET-42"
RESPONSE_PATH = "/actions/T0000/1234567890/responseSECRET77"  # a click's response_url
# where the fake's response URLs are (slack_routes' `response_urls`): it serves on loopback
LOOPBACK_RESPONSES = ("http://127.0.0.1:",)


@dataclass
class SlackFake:
    """What the fake Slack received, and the answers it is told to give next."""

    channels: dict[str, str] = field(default_factory=lambda: {
        "#finops": "CFINOPS01", "#research-gpu": "CRESEARCH1", "#ml-costs": "CMLCOSTS01"})
    posts: list[dict[str, Any]] = field(default_factory=list)  # chat.postMessage, stored
    webhook_posts: list[dict[str, Any]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    auth_headers: list[str] = field(default_factory=list)
    script: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    # post, then answer this status anyway (a timeout or 5xx after Slack took the message)
    fail_after_post: list[int] = field(default_factory=list)
    history_calls: list[dict[str, Any]] = field(default_factory=list)
    history_error: str | None = None  # e.g. missing_scope: conversations.history refuses
    response_posts: list[dict[str, Any]] = field(default_factory=list)  # to response_url
    # Slack's clock for message ts (seconds since the epoch); tests set it to their clock
    clock: Callable[[], float] = time.time
    page_size: int = 200  # conversations.history answers at most this many per page
    _ts: int = 0

    def answer_next(self, status: int, times: int = 1, retry_after: int | None = None) -> None:
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
        self.script += [(status, headers)] * times

    def messages(self, channel_id: str) -> list[dict[str, Any]]:
        return [p for p in self.posts if p["channel"] == channel_id]

    def _scripted(self) -> Response | None:
        if not self.script:
            return None
        status, headers = self.script.pop(0)
        body: dict[str, Any] = {"ok": False, "error": "ratelimited" if status == 429 else
                                "internal_error"}
        return JSONResponse(body, status_code=status, headers=headers)

    def _history(self, args: dict[str, Any]) -> Response:
        """Newest first, from `oldest` on, `limit` (at most `page_size`) per page with a
        cursor; metadata only with include_all_metadata, as Slack does."""
        self.history_calls.append(args)
        if self.history_error is not None:
            return JSONResponse({"ok": False, "error": self.history_error})
        channel = str(args["channel"])
        if not any(p["channel"] == channel for p in self.posts) and (
                channel not in self.channels.values() and not channel.startswith("D")):
            return JSONResponse({"ok": False, "error": "channel_not_found"})
        oldest = float(args.get("oldest") or 0)
        with_meta = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
        msgs = [{"ts": p["ts"], "text": p.get("text"),
                 **({"metadata": p["metadata"]} if with_meta and p.get("metadata") else {})}
                for p in reversed(self.messages(channel)) if float(p["ts"]) > oldest]
        start = int(args.get("cursor") or 0)
        size = min(int(args.get("limit") or 100), self.page_size)
        page, more = msgs[start:start + size], start + size < len(msgs)
        return JSONResponse({"ok": True, "messages": page, "has_more": more,
                             "response_metadata": {"next_cursor": str(start + size)
                                                   if more else ""}})

    def app(self) -> Starlette:
        async def response_url(request: Request) -> Response:
            self.calls.append("response_url")
            self.response_posts.append(json.loads(await request.body()))
            return PlainTextResponse("ok")

        async def webhook(request: Request) -> Response:
            self.calls.append("webhook")
            scripted = self._scripted()
            if scripted is not None:
                return scripted
            self.webhook_posts.append(json.loads(await request.body()))
            return PlainTextResponse("ok")

        async def api(request: Request) -> Response:
            method = request.path_params["method"]
            self.calls.append(method)
            self.auth_headers.append(request.headers.get("authorization", ""))
            args: dict[str, Any] = dict(request.query_params)
            raw = await request.body()
            if request.headers.get("content-type", "").startswith("application/json"):
                args.update(json.loads(raw or b"{}"))
            elif raw:
                args.update({k: v[0] for k, v in parse_qs(raw.decode()).items()})
            if request.headers.get("authorization") != f"Bearer {BOT_TOKEN}":
                return JSONResponse({"ok": False, "error": "invalid_auth"})
            if method == "chat.postMessage":
                scripted = self._scripted()
                if scripted is not None:
                    return scripted
                channel = str(args["channel"])
                if channel.startswith("#"):
                    if channel not in self.channels:
                        return JSONResponse({"ok": False, "error": "channel_not_found"})
                    channel = self.channels[channel]
                elif channel.startswith("U"):
                    channel = "D" + channel[1:]
                self._ts += 1
                ts = f"{int(self.clock())}.{self._ts:06d}"
                self.posts.append({**args, "channel": channel, "ts": ts})
                if self.fail_after_post:
                    status = self.fail_after_post.pop(0)
                    return JSONResponse({"ok": False, "error": "internal_error"},
                                        status_code=status)
                return JSONResponse({"ok": True, "channel": channel, "ts": ts})
            if method == "conversations.history":
                return self._history(args)
            if method == "conversations.list":
                chans = [{"id": cid, "name": name[1:]} for name, cid in self.channels.items()]
                return JSONResponse({"ok": True, "channels": chans,
                                     "response_metadata": {"next_cursor": ""}})
            if method == "conversations.open":
                return JSONResponse({"ok": True, "channel": {"id": "D" + args["users"][1:]}})
            return JSONResponse({"ok": False, "error": "unknown_method"}, status_code=404)

        return Starlette(routes=[Route(WEBHOOK_PATH, webhook, methods=["POST"]),
                                 Route(RESPONSE_PATH, response_url, methods=["POST"]),
                                 Route("/api/{method}", api, methods=["GET", "POST"])])


# ------------------------------------------------------------------------------------- SMTP


def self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """A throwaway certificate for 127.0.0.1 and its key (PEM files)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "smtp-cert.pem", directory / "smtp-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@dataclass
class Mailbox:
    """The SMTP handler: keeps what arrived; `refuse_next` answers the next DATA with an error."""

    received: list[Message] = field(default_factory=list)
    envelopes: list[tuple[str, list[str]]] = field(default_factory=list)
    refuse_next: list[str] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.refuse_next:
            return self.refuse_next.pop(0)
        self.received.append(message_from_bytes(envelope.original_content or envelope.content))
        self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
        return "250 OK"


SMTP_USER, SMTP_PASSWORD = "costguard", "smtp-pass-SECRET-99"


@contextmanager
def smtp_server(mailbox: Mailbox, cert: tuple[Path, Path], port: int, *,
                implicit_tls: bool = False) -> Iterator[int]:
    """aiosmtpd on 127.0.0.1: STARTTLS required before AUTH (or TLS from the first byte)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert[0]), str(cert[1]))

    def authenticator(server: Any, session: Any, envelope: Any, mechanism: str,
                      auth_data: Any) -> AuthResult:
        ok = (isinstance(auth_data, LoginPassword) and auth_data.login.decode() == SMTP_USER
              and auth_data.password.decode() == SMTP_PASSWORD)
        if ok:
            mailbox.logins.append(SMTP_USER)
        return AuthResult(success=ok)

    kwargs: dict[str, Any] = {"authenticator": authenticator, "auth_required": True}
    if implicit_tls:
        # aiosmtpd only counts STARTTLS as TLS for AUTH; this connection is TLS from the start
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            controller = Controller(mailbox, hostname="127.0.0.1", port=port,
                                    ssl_context=ctx, server_hostname="127.0.0.1",
                                    auth_require_tls=False, **kwargs)
            controller.start()
    else:
        controller = Controller(mailbox, hostname="127.0.0.1", port=port, tls_context=ctx,
                                require_starttls=True, auth_require_tls=True, **kwargs)
        controller.start()
    try:
        yield port
    finally:
        controller.stop()
