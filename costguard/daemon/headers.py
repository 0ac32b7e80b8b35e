"""Headers every answer of the daemon's HTTP app carries, so a browser holds the console to
what it is: pages of its own text and inline styles, forms that post to itself, no script,
and never inside another site's frame.

The console's acting forms (snooze, stop now) carry a CSRF token, but a page on another
site could still frame the console and lure a logged-in admin into clicking one
(clickjacking): `frame-ancestors 'none'` and `X-Frame-Options: DENY` refuse the frame.
The policy names nothing the pages do not use (they load no script, font or image from
anywhere), so a name that ever escaped its escaping still could not run a script.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = ("default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
                           "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


class SecurityHeadersMiddleware:
    """Adds `HEADERS` to every HTTP answer that does not set them itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, with_headers)
