"""Who may talk to the dashboard: the token, the cookie, Host and Origin (`guard.judge`)."""

from __future__ import annotations

import pytest
from kinetic.dashboard import guard

PORT = 8765
TOKEN = "s3cret-token"


def seen(**kw: object) -> guard.Seen:
    base: dict[str, object] = {
        "method": "GET",
        "path": "/batches/ns/grp-1",
        "host": f"127.0.0.1:{PORT}",
        "origin": None,
        "query_token": None,
        "cookie": None,
    }
    return guard.Seen(**(base | kw))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("request_seen", "allowed", "redirect", "says"),
    [
        (seen(cookie=TOKEN), True, None, ""),
        (seen(host=f"localhost:{PORT}", cookie=TOKEN), True, None, ""),
        (seen(query_token=TOKEN), True, "/batches/ns/grp-1", ""),
        (seen(), False, None, "no token"),
        (seen(cookie="guess"), False, None, "no token"),
        (seen(query_token="guess"), False, None, "wrong token"),
        # DNS rebinding: a hostile name that resolves to 127.0.0.1 still sends its own Host.
        (seen(host=f"evil.example:{PORT}", cookie=TOKEN), False, None, "DNS rebinding"),
        (seen(host="127.0.0.1:9999", cookie=TOKEN), False, None, "not this dashboard's"),
        (seen(host=None, cookie=TOKEN), False, None, "not this dashboard's"),
        # Cross-site: another page's fetch or form carries its own Origin.
        (seen(origin="http://evil.example", cookie=TOKEN), False, None, "another site"),
        (seen(origin=f"http://127.0.0.1:{PORT + 1}", cookie=TOKEN), False, None, "another site"),
        (seen(method="POST", origin=f"http://127.0.0.1:{PORT}", cookie=TOKEN), True, None, ""),
        (seen(method="POST", cookie=TOKEN), False, None, "without an Origin"),
        # A token in the URL of another site's page is still refused for its Origin.
        (seen(origin="http://evil.example", query_token=TOKEN), False, None, "another site"),
    ],
)
def test_judge(request_seen, allowed, redirect, says):
    verdict = guard.judge(request_seen, TOKEN, PORT)
    assert verdict.allowed is allowed
    assert verdict.redirect == redirect
    assert says in verdict.reason
    assert verdict.status == (403 if not allowed else 303 if redirect else 200)


def test_tokens_are_fresh_and_long():
    tokens = {guard.new_token() for _ in range(50)}
    assert len(tokens) == 50
    assert all(len(t) >= 43 for t in tokens)


def test_the_first_url_is_loopback_and_carries_the_token():
    url = guard.first_url(4321, "a b/c")
    assert url == "http://127.0.0.1:4321/?token=a+b%2Fc"


def test_each_port_has_its_own_cookie():
    assert guard.cookie_name(1000) != guard.cookie_name(1001)


def test_the_cookie_is_http_only_same_site_strict_and_session_only():
    assert guard.COOKIE == guard.CookieAttributes(httponly=True, samesite="Strict", path="/")


def test_the_policy_allows_nothing_inline_and_nothing_from_elsewhere():
    policy = guard.CONTENT_SECURITY_POLICY
    directives = dict(d.split(" ", 1) for d in policy.split("; "))
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == "'self'"
    assert directives["style-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in policy and "http" not in policy and "*" not in policy
