"""`costguard identity verify`: the daemon's own verifiers, offline, for an operator holding
an EC2 identity document (with its `/signature`, `/rsa2048` or `/pkcs7` body) or a CMS body
alone, or a GCE identity token (registered in cli.py)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.markup import escape

from costguard.cli_common import cli_clock
from costguard.cli_common import fail as _fail
from costguard.cli_common import load_settings_or_exit as _settings
from costguard.daemon.proofs import KeysUnavailable, ProofRefused, Proven
from costguard.plain_lines import stdout_console

identity_app = typer.Typer(
    help="Instance identity: check what an agent would send, offline.\n\n"
    "Example: costguard identity verify document --signature rsa2048",
    no_args_is_help=True)
console = stdout_console()
MAX_INPUT_BYTES = 64 * 1024  # the daemon's limit on a whole proof
_JWT = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$")


class Unreadable(Exception):
    """The input is no document, body or token this command reads (exit 2)."""


@dataclass
class Outcome:
    verified: bool
    provider: str
    form: str | None
    proven: Proven | None = None
    reason: str | None = None
    accepted_by_daemon: bool | None = None

    def as_json(self) -> dict[str, Any]:
        p = self.proven
        out: dict[str, Any] = {"verified": self.verified, "provider": self.provider,
                               "form": p.form if p else self.form}
        if p is not None:
            out |= {"instance_id": p.instance_id, "verified_by": p.verified_by,
                    "signed_at": p.signed_at.isoformat() if p.signed_at else None}
            if p.provider == "aws":
                out |= {"region": p.region, "zone": p.zone, "account": p.account,
                        "launched": p.launched.isoformat() if p.launched else None}
            else:
                out |= {"zone": p.zone, "region": p.region, "project": p.account}
        if self.accepted_by_daemon is not None:
            out["accepted_by_daemon"] = self.accepted_by_daemon
        if self.reason is not None:
            out["reason"] = self.reason
        return out


def _read(path: Path, what: str) -> str:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise Unreadable(f"{what} {path}: {exc.strerror}") from None
    if len(raw) > MAX_INPUT_BYTES:
        raise Unreadable(f"{what} {path} is over {MAX_INPUT_BYTES // 1024} KiB: no identity "
                         "document, body or token is")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Unreadable(f"{what} {path} is not text: IMDS and the metadata server serve "
                         "text (JSON, base64, a JWT)") from None


def _cms_form(body: str) -> str | None:
    """rsa2048 or pkcs7 for a CMS body (by its signature algorithm), None for a bare
    RSA signature; Unreadable when it is not base64 at all."""
    from costguard.daemon.aws_identity import _DSA_SIGNATURES, body_bytes, parse_signed_data

    try:
        raw = body_bytes(body, "the body")
    except ProofRefused:
        raise Unreadable("the body is not base64 (IMDS serves /signature, /rsa2048 and "
                         "/pkcs7 as base64)") from None
    if not raw.startswith(b"\x30"):
        return None
    try:
        signed = parse_signed_data(raw)
    except ProofRefused:
        return None if len(raw) in (128, 256) else "rsa2048"  # a signature, or a bad CMS
    return "pkcs7" if signed.signature_oid in _DSA_SIGNATURES else "rsa2048"


def verify_aws(document: str | None, body: str, at: datetime, certs_dir: Path | None,
               daemon_forms: list[str]) -> Outcome:
    from costguard.daemon.aws_identity import AWS_FORMS, AwsDocuments

    form = _cms_form(body) or "signature"
    if document is None and form == "signature":
        raise Unreadable("a /signature body does not embed the document: give the document "
                         "as FILE and the signature with --signature")
    verifier = AwsDocuments(certs_dir, AWS_FORMS)
    tries = [form] + (["pkcs7"] if form == "rsa2048" else [])  # China's /pkcs7 is RSA
    reason = ""
    for attempt in tries:
        try:
            proven = verifier.verify(document, body, at, attempt)
        except ProofRefused as exc:
            reason = reason or str(exc)
            continue
        return Outcome(True, "aws", attempt, proven,
                       accepted_by_daemon=attempt in daemon_forms)
    return Outcome(False, "aws", form, reason=reason)


def verify_gce(token: str, at: datetime, keys: Path | None, audience: str,
               certs_url: str) -> Outcome:
    from costguard.daemon.google_tokens import GoogleTokens

    tokens = GoogleTokens(audience, keys, certs_url)
    try:
        return Outcome(True, "gcp", "gce-token", tokens.verify(token, at))
    except ProofRefused as exc:
        return Outcome(False, "gcp", "gce-token", reason=str(exc))


def _parse_at(text: str | None) -> datetime:
    from costguard.clock import utc

    if text is None:
        return cli_clock().now()
    try:
        return utc(datetime.fromisoformat(text))
    except (ValueError, OverflowError):
        raise _fail(f"--at {text!r} is not a time: write it as ISO 8601, e.g. "
                    "2026-02-16T00:40:00Z") from None


@identity_app.command("verify")
def identity_verify(
    file: Annotated[Path, typer.Argument(
        help="An EC2 identity document, a /pkcs7 or /rsa2048 body, or a GCE token.",
        show_default=False)],
    signature: Annotated[Path | None, typer.Option(
        "--signature", metavar="FILE",
        help="The document's /signature, /rsa2048 or /pkcs7 body.")] = None,
    keys: Annotated[Path | None, typer.Option(
        "--keys", metavar="FILE", help="Google's keys: a v1 certificate map, a v3 JWKS or "
        "one PEM certificate (default: http.identity's, else fetched).")] = None,
    audience: Annotated[str | None, typer.Option(
        "--audience", metavar="AUD",
        help="The GCE token's audience (default: http.identity.audience).")] = None,
    at: Annotated[str | None, typer.Option(
        "--at", metavar="TIME", help="Judge expiry at this time (ISO 8601; default: now).")
    ] = None,
    fmt: Annotated[Literal["text", "json"], typer.Option("--format")] = "text",
    config: Annotated[Path | None, typer.Option(
        "--config", "-c", metavar="FILE", help="costguard.yaml (default: ./costguard.yaml "
        "if present).")] = None,
) -> None:
    """Verify an instance identity proof offline, exactly as the daemon's POST /v1/identity
    does (any of the three EC2 forms is checked; the JSON says whether this daemon's
    http.identity.aws_forms accepts it).

    Exit status: 0 verified, 1 refused (the reason is printed), 2 unreadable input.

    Example: costguard identity verify token.jwt --keys v3-certs.json --audience costguard
    """
    settings = _settings(config)
    ident = settings.http.identity
    when = _parse_at(at)
    try:
        text = _read(file, "FILE")
        body = _read(signature, "--signature") if signature is not None else None
        stripped = text.strip()
        if _JWT.match(stripped):
            outcome = verify_gce(stripped, when, keys or ident.google_certs_file,
                                 audience or ident.audience, ident.google_certs_url)
        elif stripped.startswith("{"):
            if body is None:
                raise Unreadable("FILE is an identity document: give its /signature, "
                                 "/rsa2048 or /pkcs7 body with --signature")
            outcome = verify_aws(text, body, when, ident.aws_certs_dir, list(ident.aws_forms))
        else:
            try:
                cms = _cms_form(text)
            except Unreadable:
                cms = None
            if cms is None:
                raise Unreadable(f"FILE {file} is no EC2 identity document, /pkcs7 or "
                                 "/rsa2048 body, or GCE identity token")
            outcome = verify_aws(None, text, when, ident.aws_certs_dir, list(ident.aws_forms))
    except Unreadable as exc:
        raise _fail(exc) from None
    except KeysUnavailable as exc:
        raise _fail(f"Google's keys: {exc}") from None
    except ProofRefused as exc:  # e.g. a document that is not JSON
        outcome = Outcome(False, "aws", None, reason=str(exc))
    if fmt == "json":
        print(json.dumps(outcome.as_json(), indent=2))
    else:
        _print(outcome)
    raise typer.Exit(0 if outcome.verified else 1)


def _print(outcome: Outcome) -> None:
    p = outcome.proven
    if p is None:
        console.print(f"[red]refused[/] ({outcome.provider}, {outcome.form or 'unknown'} "
                      f"form): {escape(outcome.reason or '')}", highlight=False)
        return
    where = (f"region {p.region}, zone {p.zone}, account {p.account}" if p.provider == "aws"
             else f"zone {p.zone}, project {p.account}")
    console.print(f"[green]verified[/]: {p.provider} instance {escape(p.instance_id)}",
                  highlight=False)
    console.print(f"  {escape(where)}", highlight=False)
    console.print(f"  form {p.form}, verified by {escape(p.verified_by)}", highlight=False)
    if p.signed_at is not None:
        console.print(f"  signed {p.signed_at.isoformat()}", highlight=False)
    if p.launched is not None:
        console.print(f"  launched {p.launched.isoformat()}", highlight=False)
    if outcome.accepted_by_daemon is False:
        console.print(f"  [yellow]note:[/] this daemon does not accept the {p.form} form "
                      "(http.identity.aws_forms)", highlight=False)
