"""Who may talk to the dashboard: a token, a cookie, and the Host and Origin headers.

The server acts with the user's own credentials, so anything that reaches it
can do what the user can. Three doors are shut:

- another local user or a web page guessing the port: every request needs the
  random token printed with the URL (as Jupyter does), exchanged once for an
  HttpOnly, SameSite=Strict cookie so it leaves the address bar and history;
- DNS rebinding (a hostile name that resolves to 127.0.0.1): the Host header
  must be this server's own loopback address and port;
- cross-site requests (a page elsewhere posting a form or a fetch at us): an
  Origin header, when sent, must be ours, and every request that changes
  anything must carry it.

Pure: the server hands `judge` what it saw and does what the verdict says.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from urllib.parse import urlencode

TOKEN_PARAM = "token"
TOKEN_BYTES = 32  # 256 bits, URL-safe base64: 43 characters
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = ("127.0.0.1", "localhost")

# The page is our own static files and JSON: nothing inline, nothing from elsewhere.
# Styles set from script through the CSSOM (el.style.width) are not inline styles.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def new_token() -> str:
    """A fresh random token for one run of the server."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def cookie_name(port: int) -> str:
    """The cookie for the server on ``port``: browsers share cookies across ports of one
    host, so two dashboards must not overwrite each other's."""
    return f"kinetic_dashboard_{port}"


def own_hosts(port: int) -> frozenset[str]:
    """The Host headers a browser sends for this server."""
    return frozenset(f"{name}:{port}" for name in LOOPBACK_NAMES)


def own_origins(port: int) -> frozenset[str]:
    """The Origin headers of this server's own pages."""
    return frozenset(f"http://{host}" for host in own_hosts(port))


def first_url(port: int, token: str, path: str = "/") -> str:
    """The URL the command prints and opens: the token in its query, once."""
    return f"http://127.0.0.1:{port}{path}?{urlencode({TOKEN_PARAM: token})}"


@dataclass(frozen=True)
class Seen:
    """What the server saw of one request (headers as sent; None when absent)."""

    method: str
    path: str
    host: str | None
    origin: str | None
    query_token: str | None
    cookie: str | None


@dataclass(frozen=True)
class Verdict:
    """What to do with a request: serve it, refuse it (403, saying why), or set the
    cookie and send the browser to the same page without the token."""

    allowed: bool
    reason: str = ""
    redirect: str | None = None  # set the cookie, then go here

    @property
    def status(self) -> int:
        return 200 if self.allowed and self.redirect is None else 303 if self.allowed else 403


def _same(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def judge(seen: Seen, token: str, port: int) -> Verdict:
    """Serve, redirect with the cookie, or refuse (and why), in that order of checks:
    Host, Origin, then the token or the cookie."""
    if seen.host not in own_hosts(port):
        return Verdict(
            False,
            f"Host {seen.host!r} is not this dashboard's (127.0.0.1:{port}): open the URL "
            "`kinetic dashboard` printed (requests through another name are refused, "
            "against DNS rebinding)",
        )
    if seen.origin is not None and seen.origin not in own_origins(port):
        return Verdict(
            False,
            f"Origin {seen.origin!r} is another site: the dashboard answers only its own pages",
        )
    if seen.method.upper() not in SAFE_METHODS and seen.origin is None:
        return Verdict(
            False,
            f"{seen.method} without an Origin header: actions are taken only from the "
            "dashboard's own pages",
        )
    if seen.query_token is not None:
        if not _same(seen.query_token, token):
            return Verdict(False, "wrong token: open the URL `kinetic dashboard` printed")
        return Verdict(True, redirect=seen.path or "/")
    if _same(seen.cookie, token):
        return Verdict(True)
    return Verdict(
        False,
        "no token: open the URL `kinetic dashboard` printed (it carries a token, exchanged "
        "for a cookie of this browser)",
    )


@dataclass(frozen=True)
class CookieAttributes:
    """The cookie's attributes: never readable by script, never sent from another site,
    gone when the browser closes (no max-age), for every path of this server."""

    httponly: bool = True
    samesite: str = "Strict"
    path: str = "/"


COOKIE = CookieAttributes()
