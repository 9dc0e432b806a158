"""The web view's optional login: HTTP Basic credentials checked by an aiohttp middleware.

Why Basic and not a session: the view is read-only and has no users to manage; Basic
works with any browser, with ``curl -u``, and behind a TLS-terminating proxy or ingress
(which is also where it belongs: Basic sends the password with every request, so serve the
view over HTTPS when it leaves the host). /api/status stays open: it holds counts and
errors, no texts, and health probes call it without credentials.
"""

from __future__ import annotations

import base64
import binascii
import hmac

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

OPEN_PATHS = frozenset({"/api/status"})
REALM = "ndd-stream view"
CHALLENGE = 'Basic realm="' + REALM + '", charset="UTF-8"'


def credentials(header: str | None) -> tuple[str, str] | None:
    """(user, password) of an ``Authorization: Basic ...`` header; None if absent or malformed."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic" or not token.strip():
        return None
    try:
        user, sep, password = base64.b64decode(token.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep else None


def basic_auth(user: str, password: str) -> Middleware:
    """Middleware: every path but OPEN_PATHS needs ``user``/``password`` (compared in
    constant time, so a wrong guess takes as long as a near miss)."""
    want = (user.encode(), password.encode())

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS:
            return await handler(request)
        user_given, password_given = credentials(request.headers.get("Authorization")) or ("", "")
        user_ok = hmac.compare_digest(user_given.encode(), want[0])  # both always compared
        password_ok = hmac.compare_digest(password_given.encode(), want[1])
        if not (user_ok and password_ok):
            return web.Response(
                status=401, text="401: this view asks for a user name and password\n",
                headers={"WWW-Authenticate": CHALLENGE})
        return await handler(request)

    return middleware
