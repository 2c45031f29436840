"""`tracekit check --post github|slack` against failing HTTP servers on 127.0.0.1 started and
stopped by the tests: redirects, 4xx/5xx, wrong success answers, resets, silent closes, stalls,
huge answers, closed ports, malformed tokens and webhook URLs.

Every case runs the real CLI and asserts: exit 2, exactly one stderr line starting ``error:``
that names the cause, no fragment of the token or of the webhook URL (path, query string) in
stdout or stderr, no "created"/"updated"/"sent" claim, and for redirects that the redirect target
never saw the credentials. Waits are never timed by the test: a stalling server blocks until the
test releases it, and the client gives up after ``TRACEKIT_POST_TIMEOUT`` = 1 s.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from helpers import distinct_copies, run_cli

from tracekit.check import run_check
from tracekit.check.post import PostError, post_github, post_slack, timeout_s
from tracekit.ingest import ingest

TOKEN = "ghp_Tok3nS3cretValue0123456789abcdef"
HOOK_PATH = "/services/T0SECRET/B0SECRET/xoxHookSecretPart"
HOOK_QUERY = "sig=QuerySecret42"
#: Substrings of the secrets that must not appear in any output, whatever the case.
GITHUB_SECRETS = (TOKEN, "Tok3nS3cret", "Value0123456789")
SLACK_SECRETS = (HOOK_PATH, HOOK_QUERY, "T0SECRET", "B0SECRET", "HookSecret", "QuerySecret")


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Behaviour = Callable[["_Handler", "Server"], None]


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        outer = self.server.outer
        with outer.lock:
            outer.requests.append(Request(self.command, self.path, dict(self.headers), body))
        outer.behaviour(self, outer)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = do_HEAD = _handle

    def finish(self) -> None:
        try:
            super().finish()
        except (OSError, ValueError):
            pass  # the behaviour closed or reset the connection itself


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    outer: Server

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a reset or closed connection is the point of some cases


class Server:
    """A threaded HTTP server on 127.0.0.1 that records every request and answers with
    ``behaviour(handler, server)``. ``release`` unblocks stalling behaviours (set on close)."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.outer = self
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


# --- behaviours -------------------------------------------------------------------------------

def send(h: _Handler, code: int, body: bytes = b"", ctype: str = "application/json",
         headers: tuple[tuple[str, str], ...] = ()) -> None:
    h.send_response(code)
    h.send_header("Content-Type", ctype)
    h.send_header("Content-Length", str(len(body)))
    for k, v in headers:
        h.send_header(k, v)
    h.end_headers()
    h.wfile.write(body)


def answer(code: int, body: bytes = b"", ctype: str = "application/json") -> Behaviour:
    return lambda h, s: send(h, code, body, ctype)


def comment(cid: int = 101) -> bytes:
    return json.dumps({"id": cid, "html_url": f"https://github.example/o/r/pull/7#issuecomment-{cid}"}).encode()


def github_accepting(h: _Handler, s: Server) -> None:
    """What GitHub answers on success: an empty comment list, then 201 with the new comment."""
    if h.command == "GET":
        send(h, 200, b"[]")
    else:
        send(h, 201, comment())


def list_then(behaviour: Behaviour, comments: bytes = b"[]") -> Behaviour:
    """GitHub listing ``comments``; ``behaviour`` for every other request (the POST or PATCH)."""
    def run(h: _Handler, s: Server) -> None:
        if h.command == "GET":
            send(h, 200, comments)
        else:
            behaviour(h, s)
    return run


def redirect(code: int, target: Callable[[], str]) -> Behaviour:
    return lambda h, s: send(h, code, b"", "text/html", (("Location", target() + "/landing" + h.path),))


def reset(h: _Handler, s: Server) -> None:
    """Close with a TCP reset (SO_LINGER 0) after reading the request, answering nothing."""
    h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    h.connection.close()


def close_silently(h: _Handler, s: Server) -> None:
    """Read the request, answer nothing, close normally."""
    h.close_connection = True


def stall(h: _Handler, s: Server) -> None:
    """Never answer (until the test releases the server)."""
    s.release.wait(120)


def stall_mid_body(h: _Handler, s: Server) -> None:
    """Headers and 10 of 1,000 promised bytes, then nothing."""
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", "1000")
    h.end_headers()
    h.wfile.write(b"[         ")
    h.wfile.flush()
    s.release.wait(120)


def garbage(h: _Handler, s: Server) -> None:
    h.wfile.write(b"HELLO THIS IS NOT HTTP\r\n\r\n")


HUGE_LIST = b"[" + b"0," * (1 << 20) + b"0]"  # a valid JSON list of 2 MiB


# --- the cases --------------------------------------------------------------------------------

@dataclass
class Case:
    """``dest``: github or slack. ``behaviour``: the server's (None: no server). ``env``: extra
    environment from the server's URL. ``reason``: a substring the error line must contain.
    ``reaches``: whether the first request must reach the server (False: refused before sending).
    ``redirect_to``: a recorder server's behaviour; it must never see the credentials."""

    name: str
    dest: str
    reason: str
    behaviour: Behaviour | None = None
    env: Callable[[str], dict[str, str]] | None = None
    reaches: bool = True
    redirect_code: int | None = None
    redirect_on_post: bool = False
    timeout: bool = False
    extra: dict[str, str] = field(default_factory=dict)


def gh_env(url: str, token: str = TOKEN) -> dict[str, str]:
    return {"GITHUB_TOKEN": token, "TRACEKIT_GITHUB_TOKEN": "", "GITHUB_API_URL": url,
            "GITHUB_REPOSITORY": "octo/infer"}


def slack_env(url: str) -> dict[str, str]:
    return {"TRACEKIT_SLACK_WEBHOOK_URL": f"{url}{HOOK_PATH}?{HOOK_QUERY}", "SLACK_WEBHOOK_URL": ""}


def bad_token(token: str) -> Callable[[str], dict[str, str]]:
    return lambda url: gh_env(url, token)


def bad_hook(make: Callable[[str], str]) -> Callable[[str], dict[str, str]]:
    return lambda url: {"TRACEKIT_SLACK_WEBHOOK_URL": make(url), "SLACK_WEBHOOK_URL": ""}


CASES = [
    # GitHub: redirects, on the first request (GET) and on the POST; the target must not get the token
    *(Case(f"github-{code}-redirect", "github", f"HTTP {code} redirect to 127.0.0.1 refused", redirect_code=code)
      for code in (301, 302, 307, 308)),
    Case("github-302-on-post", "github", "POST /repos/octo/infer/issues/7/comments failed: HTTP 302 redirect",
         redirect_code=302, redirect_on_post=True),
    Case("github-303-on-post", "github", "HTTP 303 redirect", redirect_code=303, redirect_on_post=True),
    # GitHub: error statuses, with and without bodies; a server echoing the token
    Case("github-401-json-echoing-token", "github", "HTTP 401: Bad credentials for ***",
         answer(401, json.dumps({"message": f"Bad credentials for {TOKEN}\nsecond line"}).encode())),
    Case("github-403-json-without-message", "github", "HTTP 403", answer(403, b'{"documentation_url": "x"}')),
    Case("github-404-empty", "github", "HTTP 404", answer(404)),
    Case("github-422-on-post", "github", "POST /repos/octo/infer/issues/7/comments failed: HTTP 422: Validation",
         list_then(answer(422, b'{"message": "Validation Failed"}'))),
    Case("github-500-html", "github", "HTTP 500",
         answer(500, f"<html><body>oops {TOKEN}</body></html>".encode(), "text/html")),
    Case("github-502-text", "github", "HTTP 502", answer(502, b"Bad Gateway", "text/plain")),
    Case("github-503-on-patch", "github", "PATCH /repos/octo/infer/issues/comments/55 failed: HTTP 503",
         list_then(answer(503, b'{"message": "unavailable"}'),
                   json.dumps([{"id": 55, "body": "<!-- tracekit-check -->\nold"}]).encode())),
    # GitHub: wrong success answers
    Case("github-post-200-not-201", "github", "HTTP 200 instead of 201", list_then(answer(200, comment()))),
    Case("github-post-201-not-json", "github", "HTTP 201 without the expected JSON",
         list_then(answer(201, b"created", "text/plain"))),
    Case("github-post-201-without-id", "github", "without the comment's id",
         list_then(answer(201, b'{"html_url": "https://github.example/x"}'))),
    Case("github-post-201-empty", "github", "HTTP 201 without the expected JSON", list_then(answer(201))),
    Case("github-patch-204", "github", "HTTP 204 instead of 200",
         list_then(answer(204), json.dumps([{"id": 55, "body": "<!-- tracekit-check -->\nold"}]).encode())),
    Case("github-list-html", "github", "HTTP 200 without the expected JSON",
         answer(200, b"<html>captive portal</html>", "text/html")),
    Case("github-list-object", "github", "instead of 200 with a list of comments", answer(200, b'{"id": 1}')),
    Case("github-list-huge", "github", "longer than 1 MiB", answer(200, HUGE_LIST)),
    # GitHub: the network
    Case("github-reset", "github", "127.0.0.1", reset),
    Case("github-closes-without-answer", "github", "closed the connection without answering", close_silently),
    Case("github-not-http", "github", "invalid HTTP answer", garbage),
    Case("github-slow", "github", "no answer from http://127.0.0.1", stall, timeout=True),
    Case("github-stalls-mid-body", "github", "within 1 s", list_then(stall_mid_body), timeout=True),
    Case("github-closed-port", "github", "connection refused", None,
         env=lambda url: gh_env(f"http://127.0.0.1:{_closed_port()}"), reaches=False),
    # GitHub: malformed tokens, refused before anything is sent
    Case("token-trailing-newline", "github", "GITHUB_TOKEN is not a valid token: a line break at character 37 of 37",
         github_accepting, env=bad_token(TOKEN + "\n"), reaches=False),
    Case("token-space", "github", "GITHUB_TOKEN is not a valid token: a space at character 12",
         github_accepting, env=bad_token(TOKEN[:11] + " " + TOKEN[11:]), reaches=False),
    Case("token-non-latin-1", "github", "a non-ASCII character at character 5",
         github_accepting, env=bad_token("ghp_€" + TOKEN[4:]), reaches=False),
    Case("token-control-char", "github", "a control character",
         github_accepting, env=bad_token(TOKEN + "\t"), reaches=False),
    Case("token-empty", "github", "no token: set GITHUB_TOKEN", github_accepting, env=bad_token(""), reaches=False),
    Case("api-url-with-userinfo", "github", "a user name or password in the URL is not supported",
         github_accepting, env=lambda url: gh_env(url.replace("http://", f"http://x:{TOKEN}@")), reaches=False),
    # Slack
    *(Case(f"slack-{code}-redirect", "slack", f"HTTP {code} redirect to 127.0.0.1 refused", redirect_code=code)
      for code in (302, 307)),
    Case("slack-200-not-ok", "slack", "HTTP 200 with 9 bytes instead of 200 'ok'", answer(200, b"<b>hi</b>", "text/html")),
    Case("slack-200-empty", "slack", "HTTP 200 with 0 bytes", answer(200)),
    Case("slack-201", "slack", "HTTP 201 with 2 bytes", answer(201, b"ok", "text/plain")),
    Case("slack-400-echoing-url", "slack", "HTTP 400",
         answer(400, f"invalid_payload {HOOK_PATH}?{HOOK_QUERY}".encode(), "text/plain")),
    Case("slack-404-json-echoing-url", "slack", "HTTP 404: no_service ***",
         answer(404, json.dumps({"message": f"no_service {HOOK_PATH}"}).encode())),
    Case("slack-500-html", "slack", "HTTP 500", answer(500, b"<html>down</html>", "text/html")),
    Case("slack-huge", "slack", "longer than 1 MiB", answer(200, b"ok" + b" " * (2 << 20), "text/plain")),
    Case("slack-reset", "slack", "127.0.0.1", reset),
    Case("slack-closes-without-answer", "slack", "closed the connection without answering", close_silently),
    Case("slack-slow", "slack", "no answer from http://127.0.0.1", stall, timeout=True),
    Case("slack-closed-port", "slack", "connection refused", None,
         env=lambda url: slack_env(f"http://127.0.0.1:{_closed_port()}"), reaches=False),
    Case("hook-space", "slack", "TRACEKIT_SLACK_WEBHOOK_URL is not a valid URL: a space", answer(200, b"ok"),
         env=bad_hook(lambda url: f"{url}{HOOK_PATH[:12]} {HOOK_PATH[12:]}?{HOOK_QUERY}"), reaches=False),
    Case("hook-newline", "slack", "a line break", answer(200, b"ok"),
         env=bad_hook(lambda url: f"{url}{HOOK_PATH}?{HOOK_QUERY}\n"), reaches=False),
    Case("hook-ftp-scheme", "slack", "expected an http(s) URL (the URL is not shown)", answer(200, b"ok"),
         env=bad_hook(lambda url: f"ftp://127.0.0.1{HOOK_PATH}?{HOOK_QUERY}"), reaches=False),
    Case("hook-file-scheme", "slack", "expected an http(s) URL", answer(200, b"ok"),
         env=bad_hook(lambda url: f"file://{HOOK_PATH}?{HOOK_QUERY}"), reaches=False),
    Case("hook-userinfo", "slack", "a user name or password in the URL is not supported", answer(200, b"ok"),
         env=bad_hook(lambda url: url.replace("http://", "http://HookSecret:QuerySecret@") + HOOK_PATH),
         reaches=False),
    Case("hook-bad-ipv6", "slack", "is not a valid URL (the URL is not shown)", answer(200, b"ok"),
         env=bad_hook(lambda url: f"http://[::1{HOOK_PATH}?{HOOK_QUERY}"), reaches=False),
]


def _closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_at_least_25_failure_cases() -> None:
    assert len(CASES) >= 25 and len({c.name for c in CASES}) == len(CASES)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A store with two runs of the bundled CPU sample, analyzed (so the CLI only reads it)."""
    tmp = tmp_path_factory.mktemp("post_failures")
    store = tmp / "store.duckdb"
    ids = [ingest([p], store)[0].run_id for p in distinct_copies(tmp, 2)]
    run_check(store, candidates=[ids[1]], baselines=[ids[0]])
    return store, ids[0], ids[1]


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    made: list[Server] = []
    yield made
    for s in made:
        s.close()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_post_failure(case: Case, two_runs: tuple[Path, str, str], servers: list[Server]) -> None:
    store, base, cand = two_runs
    recorder: Server | None = None
    behaviour = case.behaviour
    if case.redirect_code is not None:
        # the target answers like a successful API, so following the redirect would "succeed"
        recorder = Server(github_accepting if case.dest == "github" else answer(200, b"ok", "text/plain"))
        servers.append(recorder)
        target = recorder.url
        hop = redirect(case.redirect_code, lambda: target)
        behaviour = list_then(hop) if case.redirect_on_post else hop
    server = Server(behaviour or answer(500))
    servers.append(server)
    env = (case.env or (gh_env if case.dest == "github" else slack_env))(server.url)
    env |= {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost", **case.extra}
    if case.timeout:
        env["TRACEKIT_POST_TIMEOUT"] = "1"
    args = ["check", "--store", str(store), "--candidate", cand, "--baseline", base, "--post", case.dest,
            "--post-on", "always"]
    if case.dest == "github":
        args += ["--pr", "7"]
    r = run_cli(*args, env=env)

    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert case.reason in lines[0], lines[0]
    assert "Traceback" not in r.stderr
    for claim in ("comment created", "comment updated", "message sent"):
        assert claim not in r.stderr
    out = r.stdout + r.stderr
    secret_values = [v for k, v in env.items() if k in ("GITHUB_TOKEN", "TRACEKIT_SLACK_WEBHOOK_URL") and len(v) > 8]
    for secret in (*GITHUB_SECRETS, *SLACK_SECRETS, *secret_values, *(v.strip() for v in secret_values)):
        assert secret not in out, f"secret fragment {secret!r} in the output"
    assert r.stdout.startswith("<!-- tracekit-check -->\n")  # the message is still printed

    if case.reaches:
        assert server.requests, "the request never reached the server"
        first = server.requests[0]
        if case.dest == "github":
            assert first.headers["Authorization"] == f"Bearer {TOKEN}"  # sent, never shown
            assert first.path.startswith("/repos/octo/infer/issues/7/comments")
        else:
            assert first.path == f"{HOOK_PATH}?{HOOK_QUERY}" and first.method == "POST"
    else:
        assert not server.requests, "a malformed secret or URL was sent"
    if recorder is not None:
        # the redirect was not followed: the target saw neither the token nor the webhook's body
        assert all("Authorization" not in q.headers for q in recorder.requests)
        assert recorder.requests == []
        assert server.requests[-1].method == ("POST" if case.redirect_on_post or case.dest == "slack" else "GET")


# --- in process: nothing but PostError leaves the posters, and never with a secret ---------------

def test_unexpected_exceptions_become_one_line_post_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure nobody foresaw (here: the opener raising with the secret in its message) still
    comes out as a PostError that carries neither the secret nor a chained exception."""
    from tracekit.check import post

    class Exploding:
        def open(self, req: Any, timeout: float) -> Any:
            raise RuntimeError(f"boom {TOKEN} {HOOK_PATH}")

    monkeypatch.setattr(post, "_opener", Exploding)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_API_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("TRACEKIT_SLACK_WEBHOOK_URL", f"http://127.0.0.1:9{HOOK_PATH}")
    with pytest.raises(PostError) as gh:
        post_github("<!-- tracekit-check -->\nx", repo="octo/infer", pr=7)
    assert str(gh.value) == "github octo/infer#7: GET /repos/octo/infer/issues/7/comments failed: request to " \
                            "http://127.0.0.1:9 failed (RuntimeError)"
    assert gh.value.__context__ is None and gh.value.__cause__ is None  # nothing chained that holds a secret
    with pytest.raises(PostError) as sl:
        post_slack({"text": "x"})
    assert str(sl.value) == "slack: POST http://127.0.0.1:9/*** failed: request to http://127.0.0.1:9 failed " \
                            "(RuntimeError)"
    # a bug outside the request itself
    monkeypatch.setattr(post, "marker", lambda key: (_ for _ in ()).throw(KeyError(TOKEN)))
    with pytest.raises(PostError) as bug:
        post_github("x", repo="octo/infer", pr=7)
    assert str(bug.value) == "github: posting failed (KeyError)"
    for e in (sl.value, bug.value):
        assert e.__context__ is None and e.__cause__ is None and TOKEN not in str(e) and HOOK_PATH not in str(e)


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", "inf"])
def test_post_timeout_override_is_validated(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEKIT_POST_TIMEOUT", value)
    with pytest.raises(PostError, match="TRACEKIT_POST_TIMEOUT: .*expected a number of seconds > 0"):
        timeout_s()
    monkeypatch.setenv("TRACEKIT_POST_TIMEOUT", "2.5")
    assert timeout_s() == 2.5


def test_fragments_of_a_secret_are_withheld() -> None:
    """A server that quotes a cut or shifted token, or one path segment of a webhook URL (the part
    of a Slack URL that is the secret), gets its message withheld, not printed."""
    from tracekit.check.post import _one_line

    token = "ghp_A1b2C3d4E5f6G7h8I9j0"
    for text in (f"bad credentials {token[:-1]}", f"token {token[4:]} expired", f"x{token[3:12]}y"):
        shown = _one_line(text, (token,))
        assert "withheld" in shown and token[4:10] not in shown
    url = "https://hooks.slack.com/services/T000/B000/XyzSecretPart123"
    path = "/services/T000/B000/XyzSecretPart123"
    secrets = (url, path, *path.split("/"))
    for text in ("invalid webhook secret XyzSecretPart123", "invalid webhook secret XyzSecretPart12"):
        shown = _one_line(text, tuple(s for s in secrets if len(s) > 1))
        assert "XyzSecret" not in shown, shown
    # a message that quotes nothing secret is kept, words like "services" included
    assert _one_line("no_service for this team", tuple(s for s in secrets if len(s) > 1)) == "no_service for this team"
