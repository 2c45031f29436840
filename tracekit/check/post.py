"""Posting a check: a GitHub pull-request comment (created once, then updated) and a Slack
incoming webhook. Stdlib HTTP only.

Secrets come from the environment: ``GITHUB_TOKEN`` (or ``TRACEKIT_GITHUB_TOKEN``) for GitHub,
``TRACEKIT_SLACK_WEBHOOK_URL`` (or ``SLACK_WEBHOOK_URL``; the URL itself is the secret, its path
and query string included) for Slack. ``GITHUB_API_URL`` (set by GitHub Actions; default
``https://api.github.com``) points the GitHub client elsewhere, e.g. GitHub Enterprise or a test
server. The repository comes from ``GITHUB_REPOSITORY`` (``owner/name``) and the pull request from
the option, ``GITHUB_REF`` (``refs/pull/N/merge``) or the event file at ``GITHUB_EVENT_PATH``.

What is guaranteed (tested against failing servers on 127.0.0.1 in ``tests/test_post_failures.py``):

- **No secret in any output.** A token or webhook URL is validated before it is used (a token:
  1 to 4,096 visible ASCII characters, no space, line break or control character; a webhook: an
  http(s) URL of visible ASCII with a host and without ``user:password@``). A validation message
  names the variable and the position of the bad character, never the value. Every failure of a
  request is reported from a fixed description of its cause (refused, reset, closed, timed out,
  TLS, HTTP status) and the non-secret host; text an answer carries (GitHub's ``message``) is cut
  to one line of 200 characters with any secret replaced by ``***``. The webhook's path and query
  string never appear: a Slack target reads ``https://hooks.slack.com/***``.
- **Nothing but** :class:`PostError` **leaves** :func:`post_github` **and** :func:`post_slack`
  (the CLI prints it as one ``error:`` line and exits 2); no exception is chained to it.
- **Redirects are refused**, never followed: a request carries credentials (the token header, the
  secret URL), and following a 3xx would hand them to another host and turn the POST into a GET.
  A 3xx answer is the error ``HTTP 302 redirect to <host> refused``.
- **Success only on the documented answer**: listing comments ``200`` with a JSON array; creating
  one ``201`` with a JSON object whose ``id`` is an integer; updating one ``200`` with such an
  object; the Slack webhook ``200`` with the body ``ok``. Anything else is a :class:`PostError`.
- **Bounded waits and reads**: connecting and each wait for data is bounded by :data:`TIMEOUT_S`
  seconds (override: ``TRACEKIT_POST_TIMEOUT``, seconds > 0), reading an answer stops
  :data:`TIMEOUT_S` after its headers arrived, and at most :data:`MAX_ANSWER_BYTES` of an answer
  are read (more is an error).
"""

from __future__ import annotations

import http.client
import json
import math
import os
import re
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from tracekit.check.message import marker
from tracekit.errors import PathError

#: Seconds to wait for a connection, for each read, and in all for an answer's body (override:
#: ``TRACEKIT_POST_TIMEOUT``).
TIMEOUT_S = 30.0
TIMEOUT_ENV = "TRACEKIT_POST_TIMEOUT"
GITHUB_API = "https://api.github.com"
#: GitHub's limit on a comment body (characters); longer messages are cut with a note.
GITHUB_BODY_LIMIT = 65_000
#: The most bytes of one answer read (1 MiB); a longer answer is an error.
MAX_ANSWER_BYTES = 1 << 20
#: Longest token accepted (characters); GitHub's tokens are 40 to ~255.
MAX_TOKEN_CHARS = 4096
#: Pages of 100 comments searched for the previous tracekit comment.
MAX_COMMENT_PAGES = 100
#: Server-provided text (GitHub's ``message``) kept in an error, characters.
_DETAIL_CHARS = 200


class PostError(PathError):
    """Posting failed (missing or malformed token or webhook, HTTP error, redirect, unexpected
    answer, unreachable server). ``path`` names the destination without any secret."""


@dataclass(frozen=True)
class Posted:
    """What a post did: ``action`` is ``created`` or ``updated`` (GitHub) or ``sent`` (Slack);
    ``url`` the comment's address (GitHub) or None."""

    action: str
    url: str | None


@dataclass(frozen=True)
class _Answer:
    """A 2xx answer: HTTP ``status``, ``body`` (at most :data:`MAX_ANSWER_BYTES`) and its
    ``content_type``."""

    status: int
    body: bytes
    content_type: str


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Never follow a redirect: the 3xx answer becomes an :class:`urllib.error.HTTPError`."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> None:
        return None


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(_NoRedirect())


def timeout_s() -> float:
    """:data:`TIMEOUT_S`, or ``TRACEKIT_POST_TIMEOUT`` (seconds, a number > 0) when set."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise PostError(TIMEOUT_ENV, f"{raw[:40]!r}: expected a number of seconds > 0")
    return value


def _bad_char(text: str, allowed: re.Pattern[str]) -> str | None:
    """Where ``text`` has its first character outside ``allowed``, described without the text."""
    for i, ch in enumerate(text):
        if not allowed.fullmatch(ch):
            kind = ("a line break" if ch in "\r\n" else "a space" if ch == " " else
                    "a control character" if ord(ch) < 32 or ord(ch) == 127 else "a non-ASCII character")
            return f"{kind} at character {i + 1} of {len(text)}"
    return None


#: Visible ASCII: what an HTTP header value or a URL may carry without escaping.
_VISIBLE = re.compile(r"[\x21-\x7e]")


def _first_set(names: tuple[str, str], path: str, missing: str) -> tuple[str, str]:
    """The value of the first non-empty environment variable of ``names`` and its name;
    :class:`PostError` naming both variables when neither is set."""
    for name in names:
        value = os.environ.get(name)
        if value:
            return value, name
    raise PostError(path, f"{missing}: set {names[0]} (or {names[1]})")


def _github_token() -> tuple[str, str]:
    """The token and the name of the variable it came from; validated, never shown."""
    token, name = _first_set(("GITHUB_TOKEN", "TRACEKIT_GITHUB_TOKEN"), "github", "no token")
    bad = _bad_char(token, _VISIBLE)
    if bad:
        raise PostError("github", f"{name} is not a valid token: {bad} (the token is not shown)")
    if len(token) > MAX_TOKEN_CHARS:
        raise PostError("github", f"{name} is not a valid token: {len(token)} characters, "
                        f"more than {MAX_TOKEN_CHARS} (the token is not shown)")
    return token, name


def _origin(url: str, name: str, where: str, *, secret: bool) -> tuple[urllib.parse.SplitResult, str]:
    """Check that ``url`` (from variable ``name``) is an http(s) URL of visible ASCII with a host
    and no user info; return it split and its shown form (``scheme://host[:port]``). A refused URL
    is described, never shown (it may carry a password or be a secret itself: ``secret``)."""
    hidden = " (the URL is not shown)" if secret else ""
    bad = _bad_char(url, _VISIBLE)
    if bad:
        raise PostError(where, f"{name} is not a valid URL: {bad}{hidden}")
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname
        port = parts.port
    except ValueError:
        raise PostError(where, f"{name} is not a valid URL{hidden}") from None
    if parts.scheme not in ("http", "https"):
        raise PostError(where, f"{name}: expected an http(s) URL{hidden}")
    if "@" in parts.netloc:
        raise PostError(where, f"{name}: a user name or password in the URL is not supported{hidden}")
    if not host:
        raise PostError(where, f"{name}: the URL has no host{hidden}")
    shown_host = f"[{host}]" if ":" in host else host
    return parts, f"{parts.scheme}://{shown_host}" + (f":{port}" if port is not None else "")


#: A server's text that shares this many consecutive characters with a secret is not shown.
_FRAGMENT = 6


def _leaks(text: str, secrets: tuple[str, ...]) -> bool:
    """True when ``text`` holds any :data:`_FRAGMENT` consecutive characters of a secret (a cut or
    shifted copy of a token, one path segment of a webhook URL)."""
    for secret in secrets:
        # whole URLs and paths are checked through their segments (given as secrets of their
        # own); a plain lowercase word such as Slack's "services" is not secret
        if "/" in secret or re.fullmatch(r"[a-z_-]+", secret) or len(secret) < _FRAGMENT:
            continue
        if any(secret[i : i + _FRAGMENT] in text for i in range(len(secret) - _FRAGMENT + 1)):
            return True
    return False


def _one_line(text: str, secrets: tuple[str, ...], limit: int = _DETAIL_CHARS) -> str:
    """``text`` as one line of at most ``limit`` characters, secrets replaced by ``***``; a text
    that still holds any fragment of a secret is withheld whole."""
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    if _leaks(text, secrets):
        return "(the server's message is withheld: it quotes part of a secret)"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _host_of(location: str | None, base: str) -> str:
    """The host a redirect points to (no path, no query), or ``another URL``."""
    if not location:
        return "an unnamed location"
    try:
        host = urllib.parse.urlsplit(urllib.parse.urljoin(base, location)).hostname
    except ValueError:
        host = None
    if not host or not re.fullmatch(r"[A-Za-z0-9.:_-]{1,253}", host):
        return "another URL"
    return host


def _network_reason(exc: BaseException, origin: str, timeout: float) -> str:
    """What went wrong on the network, from the exception's type (its text may carry a secret)."""
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException):
        exc = exc.reason
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return f"no answer from {origin} within {timeout:g} s ({TIMEOUT_ENV} sets the limit)"
    if isinstance(exc, ConnectionRefusedError):
        return f"cannot reach {origin}: connection refused"
    if isinstance(exc, http.client.RemoteDisconnected):
        return f"{origin} closed the connection without answering"
    if isinstance(exc, ConnectionResetError):
        return f"{origin} reset the connection"
    if isinstance(exc, (ConnectionAbortedError, BrokenPipeError)):
        return f"{origin} closed the connection"
    if isinstance(exc, http.client.IncompleteRead):
        return f"{origin} closed the connection before the end of its answer"
    if isinstance(exc, socket.gaierror):
        return f"cannot reach {origin}: the host name does not resolve"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"cannot reach {origin}: TLS certificate verification failed"
    if isinstance(exc, ssl.SSLError):
        return f"cannot reach {origin}: TLS error"
    if isinstance(exc, http.client.HTTPException):
        return f"{origin} sent an invalid HTTP answer ({type(exc).__name__})"
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot reach {origin}: {_one_line(exc.strerror, ())}"
    return f"request to {origin} failed ({type(exc).__name__})"


def _read_capped(resp: Any, deadline: float) -> bytes:
    """At most :data:`MAX_ANSWER_BYTES` of ``resp``'s body, read before ``deadline`` (monotonic s)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError
        chunk = resp.read1(64 * 1024)  # what is there, so that a drip-feeding server meets the deadline
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise _TooLarge


class _TooLarge(Exception):
    """An answer longer than :data:`MAX_ANSWER_BYTES`."""


def _fail(where: str, what: str, reason: str) -> NoReturn:
    raise PostError(where, f"{what} failed: {reason}")


def _request(method: str, url: str, *, where: str, what: str, origin: str, secrets: tuple[str, ...],
             body: Any = None, headers: dict[str, str] | None = None) -> _Answer:
    """Send one request without following redirects; return its 2xx answer or raise
    :class:`PostError` (``what``: the request as shown, e.g. ``GET /repos/o/r/issues/7/comments``;
    ``origin``: the server as shown). No other exception leaves this function."""
    timeout = timeout_s()
    try:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method, headers={
            "User-Agent": "tracekit-check", **({"Content-Type": "application/json"} if data is not None else {}),
            **(headers or {})})
        with _opener().open(req, timeout=timeout) as resp:  # http(s) URLs only, checked by the callers
            raw = _read_capped(resp, time.monotonic() + timeout)
            return _Answer(resp.status, raw, resp.headers.get_content_type())
    except urllib.error.HTTPError as exc:
        reason = _status_reason(exc, url, secrets, timeout)
    except _TooLarge:
        reason = f"the answer of {origin} is longer than {MAX_ANSWER_BYTES // (1 << 20)} MiB"
    except Exception as exc:  # noqa: BLE001 - the boundary: nothing but PostError leaves, and no exception text
        reason = _network_reason(exc, origin, timeout)
    # raised here, outside the handlers, so that no exception (whose text may hold a secret) is chained
    raise PostError(where, f"{what} failed: {reason}")


def _status_reason(exc: urllib.error.HTTPError, url: str, secrets: tuple[str, ...], timeout: float) -> str:
    """The reason for a non-2xx answer: its status, the redirect's host, or GitHub's ``message``."""
    code = exc.code
    try:
        if 300 <= code < 400:
            location = exc.headers.get("Location") if exc.headers is not None else None
            return f"HTTP {code} redirect to {_host_of(location, url)} refused (redirects are not followed " \
                   "with credentials)"
        detail = ""
        try:
            raw = _read_capped(exc, time.monotonic() + timeout)
            payload = json.loads(raw) if raw else None
            if isinstance(payload, dict) and isinstance(payload.get("message"), str) and payload["message"].strip():
                detail = ": " + _one_line(payload["message"], secrets)
        except Exception:  # noqa: BLE001 - the detail is optional; the status says enough
            detail = ""
        return f"HTTP {code}{detail}"
    finally:
        exc.close()


def _json(answer: _Answer, where: str, what: str, expected: str) -> Any:
    try:
        return json.loads(answer.body)
    except ValueError:
        pass
    _fail(where, what, f"HTTP {answer.status} without the expected JSON ({expected}; got "
          f"{len(answer.body)} bytes of {answer.content_type})")


def pull_request_number(explicit: int | None = None) -> int:
    """The PR number: ``explicit``, else from ``GITHUB_REF`` or the ``GITHUB_EVENT_PATH`` event."""
    if explicit is not None:
        if explicit <= 0:
            raise PostError("github", f"--pr {explicit}: expected a pull request number > 0")
        return explicit
    m = re.fullmatch(r"refs/pull/(\d{1,12})/(merge|head)", os.environ.get("GITHUB_REF", ""))
    if m:
        return int(m.group(1))
    event = os.environ.get("GITHUB_EVENT_PATH")
    if event:
        try:
            doc = json.loads(Path(event).read_text())
            number = (doc.get("pull_request") or {}).get("number") or doc.get("number")
            if isinstance(number, int) and not isinstance(number, bool) and number > 0:
                return number
        except (OSError, ValueError, AttributeError):
            pass
    raise PostError("github", "no pull request number: give --pr N (or run on a pull_request event)")


def post_github(markdown: str, *, repo: str | None = None, pr: int | None = None, key: str | None = None) -> Posted:
    """Create the tracekit comment on the pull request, or update the one already there (found by
    its hidden :func:`~tracekit.check.message.marker` for ``key``). ``markdown`` must start with it.
    Raises :class:`PostError` and nothing else."""
    try:
        return _post_github(markdown, repo=repo, pr=pr, key=key)
    except PostError as exc:  # a fresh error: no chained exception travels with it
        error = PostError(exc.path, exc.reason)
    except Exception as exc:  # noqa: BLE001 - the boundary: a bug here must not print a secret either
        error = PostError("github", f"posting failed ({type(exc).__name__})")
    raise error


def _post_github(markdown: str, *, repo: str | None, pr: int | None, key: str | None) -> Posted:
    token, _ = _github_token()
    secrets = (token,)
    repo = repo or os.environ.get("GITHUB_REPOSITORY")
    if not repo or not re.fullmatch(r"[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}", repo):
        raise PostError("github", f"repository {_one_line(repo or '', secrets, 120)!r}: expected owner/name "
                        "(--repo or GITHUB_REPOSITORY)")
    number = pull_request_number(pr)
    api = (os.environ.get("GITHUB_API_URL") or GITHUB_API).rstrip("/")
    _, origin = _origin(api, "GITHUB_API_URL", "github", secret=False)
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
               "X-GitHub-Api-Version": "2022-11-28"}
    where = f"github {repo}#{number}"
    if len(markdown) > GITHUB_BODY_LIMIT:
        markdown = markdown[:GITHUB_BODY_LIMIT] + "\n\n_(cut: the full message is in the job's output)_\n"
    tag = marker(key)
    existing: int | None = None
    list_path = f"/repos/{repo}/issues/{number}/comments"
    for page in range(1, MAX_COMMENT_PAGES + 1):
        what = f"GET {list_path}"
        answer = _request("GET", f"{api}{list_path}?per_page=100&page={page}", where=where, what=what,
                          origin=origin, secrets=secrets, headers=headers)
        comments = _json(answer, where, what, "a list of comments") if answer.status == 200 else None
        if answer.status != 200 or not isinstance(comments, list):
            _fail(where, what, f"unexpected answer: HTTP {answer.status} instead of 200 with a list of comments")
        for c in comments:
            if isinstance(c, dict) and isinstance(c.get("body"), str) and c["body"].startswith(tag):
                cid = c.get("id")
                if not isinstance(cid, int) or isinstance(cid, bool) or cid <= 0:
                    _fail(where, what, "unexpected answer: the tracekit comment has no numeric id")
                existing = cid
                break
        if existing is not None or len(comments) < 100:
            break
    else:
        raise PostError(where, f"more than {MAX_COMMENT_PAGES * 100} comments: not searched for the previous "
                        "tracekit comment")
    if existing is not None:
        what = f"PATCH /repos/{repo}/issues/comments/{existing}"
        answer = _request("PATCH", f"{api}/repos/{repo}/issues/comments/{existing}", where=where, what=what,
                          origin=origin, secrets=secrets, body={"body": markdown}, headers=headers)
        action, expected = "updated", 200
    else:
        what = f"POST {list_path}"
        answer = _request("POST", f"{api}{list_path}", where=where, what=what, origin=origin, secrets=secrets,
                          body={"body": markdown}, headers=headers)
        action, expected = "created", 201
    if answer.status != expected:
        _fail(where, what, f"unexpected answer: HTTP {answer.status} instead of {expected}; the comment may not "
              f"have been {action}")
    res = _json(answer, where, what, "the comment")
    cid = res.get("id") if isinstance(res, dict) else None
    if not isinstance(cid, int) or isinstance(cid, bool):
        _fail(where, what, f"unexpected answer: HTTP {answer.status} without the comment's id; the comment may "
              f"not have been {action}")
    url = res.get("html_url")
    shown = url if isinstance(url, str) and re.fullmatch(r"https?://[\x21-\x7e]{1,500}", url) else None
    if shown is not None and _leaks(shown, (token,)):
        shown = None
    return Posted(action, shown)


def post_slack(payload: dict[str, Any]) -> Posted:
    """Send the payload to the Slack incoming webhook from the environment. Raises
    :class:`PostError` and nothing else."""
    try:
        return _post_slack(payload)
    except PostError as exc:  # a fresh error: no chained exception travels with it
        error = PostError(exc.path, exc.reason)
    except Exception as exc:  # noqa: BLE001 - the boundary: a bug here must not print a secret either
        error = PostError("slack", f"posting failed ({type(exc).__name__})")
    raise error


def _post_slack(payload: dict[str, Any]) -> Posted:
    url, name = _first_set(("TRACEKIT_SLACK_WEBHOOK_URL", "SLACK_WEBHOOK_URL"), "slack", "no webhook")
    parts, origin = _origin(url, name, "slack", secret=True)
    # the URL is the secret: a message shows only its origin, never its path or query string
    secrets = tuple(s for s in (url, parts.path, parts.query, parts.fragment, *parts.path.split("/"))
                    if len(s) > 1)
    what = f"POST {origin}/***"
    answer = _request("POST", url, where="slack", what=what, origin=origin, secrets=secrets, body=payload)
    if answer.status != 200 or answer.body.strip() != b"ok":
        _fail("slack", what, f"unexpected answer: HTTP {answer.status} with {len(answer.body)} bytes instead "
              "of 200 'ok'; the message may not have been sent")
    return Posted("sent", None)
