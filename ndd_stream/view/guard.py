"""The view's HTTP hardening: security headers on every response, and the Host rule.

Headers: a strict Content-Security-Policy (the pages load one script and one stylesheet
from this server and nothing inline, so an injected ``<script>`` or ``onerror=`` would not
run even if escaping failed), no sniffing, no framing, no referrer, and ``no-store`` on
everything but the two static files (pages show item texts, possibly behind a login).

The Host rule (DNS rebinding): without a password, a page on another site could point its
own name at 127.0.0.1 and read the view through the visitor's browser; the browser then
sends that name as ``Host``. So without a password only loopback names and addresses, the
bind address, and ``NDD_VIEW_ALLOWED_HOSTS`` are served; anything else gets 421. With a
password any Host is served: the login protects (a rebinding page has no credentials).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "*"})
#: Paths served whatever the Host: counts and errors, no texts; probes (Kubernetes sends the
#: pod's address as Host) call it. The same path the login leaves open (auth.OPEN_PATHS).
OPEN_PATHS = frozenset({"/api/status"})


async def add_headers(request: web.Request, response: web.StreamResponse) -> None:
    """aiohttp ``on_response_prepare``: every response, errors and 401/421 included."""
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    # no-store but on the two static files, which say no-cache themselves (server.static)
    response.headers.setdefault("Cache-Control", "no-store")


def host_name(header: str) -> str:
    """The name or address in a ``Host`` header, lower case, without port, brackets or a
    final dot (``[::1]:6067`` -> ``::1``, ``LocalHost.:80`` -> ``localhost``)."""
    value = header.strip().lower()
    if value.startswith("["):
        value = value[1:].partition("]")[0]
    elif value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".")


def is_loopback(name: str) -> bool:
    """``localhost``, ``*.localhost`` (browsers resolve those to loopback themselves), or a
    loopback address (127.0.0.0/8, ::1)."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_allowed(header: str | None, allowed: Iterable[str]) -> bool:
    """Whether a request with this ``Host`` is served without a password. ``allowed``:
    exact names or addresses, ``.example.org`` for that domain and its subdomains, ``*``
    for any. No Host header at all (HTTP/1.0 tools) is served: a browser always sends one."""
    if header is None:
        return True
    name = host_name(header)
    if is_loopback(name):
        return True
    for entry in allowed:
        entry = host_name(entry) if not entry.startswith(".") else entry.lower().rstrip(".")
        if entry == "*" or name == entry:
            return True
        if entry.startswith(".") and (name == entry[1:] or name.endswith(entry)):
            return True
    return False


def host_rule(bind: str, allowed: Iterable[str]) -> Middleware:
    """Middleware: requests for another Host than loopback, the bind address or
    ``allowed`` get 421 with what to do (only installed without a password)."""
    names = [*allowed] + ([] if bind.strip().lower() in WILDCARD_BINDS else [bind])

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS or host_allowed(request.headers.get("Host"), names):
            return await handler(request)
        return web.Response(
            status=421, content_type="text/plain",
            text="421: this view has no login, so it answers only for localhost, loopback "
            "addresses and its bind address (a guard against DNS rebinding). To reach it by "
            "this name, add the name to NDD_VIEW_ALLOWED_HOSTS, or set NDD_VIEW_PASSWORD.\n")

    return middleware
