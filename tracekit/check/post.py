"""Posting a check: a GitHub pull-request comment (created once, then updated) and a Slack
incoming webhook. Stdlib HTTP only.

Secrets come from the environment and are never printed, logged or put in an error message:
``GITHUB_TOKEN`` (or ``TRACEKIT_GITHUB_TOKEN``) for GitHub, ``TRACEKIT_SLACK_WEBHOOK_URL`` (or
``SLACK_WEBHOOK_URL``; the URL itself is the secret) for Slack. ``GITHUB_API_URL`` (set by GitHub
Actions; default ``https://api.github.com``) points the GitHub client elsewhere, e.g. GitHub
Enterprise or a test server. The repository comes from ``GITHUB_REPOSITORY`` (``owner/name``) and
the pull request from the option, ``GITHUB_REF`` (``refs/pull/N/merge``) or the event file at
``GITHUB_EVENT_PATH``.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.check.message import marker
from tracekit.errors import TracekitError

TIMEOUT_S = 30.0
GITHUB_API = "https://api.github.com"
#: GitHub's limit on a comment body (characters); longer messages are cut with a note.
GITHUB_BODY_LIMIT = 65_000


class PostError(TracekitError):
    """Posting failed (missing token or repository, HTTP error, unreachable server). ``path`` names
    the destination without any secret."""

    def __init__(self, where: str, reason: str) -> None:
        self.path = where
        self.reason = reason
        super().__init__(f"{where}: {reason}")


@dataclass(frozen=True)
class Posted:
    """What a post did: ``action`` is ``created`` or ``updated`` (GitHub) or ``sent`` (Slack);
    ``url`` the comment's address (GitHub) or None."""

    action: str
    url: str | None


def _request(method: str, url: str, where: str, body: Any = None, headers: dict[str, str] | None = None,
             secrets: tuple[str, ...] = ()) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={
        "User-Agent": "tracekit-check", **({"Content-Type": "application/json"} if data is not None else {}),
        **(headers or {})})

    def clean(text: str) -> str:
        for s in secrets:
            if s:
                text = text.replace(s, "***")
        return text

    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:  # http(s) URLs only, checked by the callers
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        detail = ""
        try:
            payload = json.loads(exc.read() or b"{}")
            detail = f": {payload.get('message', '')}" if isinstance(payload, dict) and payload.get("message") else ""
        except (ValueError, OSError):
            pass
        raise PostError(where, clean(f"{method} {urllib.parse.urlsplit(url).path} failed: HTTP {exc.code}{detail}")) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise PostError(where, clean(f"cannot reach the server: {reason}")) from None
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def pull_request_number(explicit: int | None = None) -> int:
    """The PR number: ``explicit``, else from ``GITHUB_REF`` or the ``GITHUB_EVENT_PATH`` event."""
    if explicit is not None:
        return explicit
    m = re.fullmatch(r"refs/pull/(\d+)/(merge|head)", os.environ.get("GITHUB_REF", ""))
    if m:
        return int(m.group(1))
    event = os.environ.get("GITHUB_EVENT_PATH")
    if event:
        try:
            doc = json.loads(Path(event).read_text())
            number = (doc.get("pull_request") or {}).get("number") or doc.get("number")
            if isinstance(number, int):
                return number
        except (OSError, ValueError, AttributeError):
            pass
    raise PostError("github", "no pull request number: give --pr N (or run on a pull_request event)")


def post_github(markdown: str, *, repo: str | None = None, pr: int | None = None, key: str | None = None) -> Posted:
    """Create the tracekit comment on the pull request, or update the one already there (found by
    its hidden :func:`~tracekit.check.message.marker` for ``key``). ``markdown`` must start with it."""
    token = os.environ.get("GITHUB_TOKEN") or os.environ.get("TRACEKIT_GITHUB_TOKEN")
    if not token:
        raise PostError("github", "no token: set GITHUB_TOKEN (or TRACEKIT_GITHUB_TOKEN)")
    repo = repo or os.environ.get("GITHUB_REPOSITORY")
    if not repo or not re.fullmatch(r"[\w.-]+/[\w.-]+", repo):
        raise PostError("github", f"repository {repo or ''!r}: expected owner/name (--repo or GITHUB_REPOSITORY)")
    number = pull_request_number(pr)
    api = (os.environ.get("GITHUB_API_URL") or GITHUB_API).rstrip("/")
    if urllib.parse.urlsplit(api).scheme not in ("http", "https"):
        raise PostError("github", f"GITHUB_API_URL {api!r}: expected an http(s) URL")
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
               "X-GitHub-Api-Version": "2022-11-28"}
    where = f"github {repo}#{number}"
    if len(markdown) > GITHUB_BODY_LIMIT:
        markdown = markdown[:GITHUB_BODY_LIMIT] + "\n\n_(cut: the full message is in the job's output)_\n"
    tag = marker(key)
    existing = None
    page = 1
    while existing is None:
        comments = _request("GET", f"{api}/repos/{repo}/issues/{number}/comments?per_page=100&page={page}",
                            where, headers=headers, secrets=(token,))
        if not isinstance(comments, list) or not comments:
            break
        existing = next((c for c in comments if isinstance(c, dict) and str(c.get("body", "")).startswith(tag)), None)
        if len(comments) < 100:
            break
        page += 1
    if existing is not None:
        res = _request("PATCH", f"{api}/repos/{repo}/issues/comments/{int(existing['id'])}", where,
                       body={"body": markdown}, headers=headers, secrets=(token,))
        action = "updated"
    else:
        res = _request("POST", f"{api}/repos/{repo}/issues/{number}/comments", where,
                       body={"body": markdown}, headers=headers, secrets=(token,))
        action = "created"
    url = res.get("html_url") if isinstance(res, dict) else None
    return Posted(action, url if isinstance(url, str) else None)


def post_slack(payload: dict[str, Any]) -> Posted:
    """Send the payload to the Slack incoming webhook from the environment."""
    url = os.environ.get("TRACEKIT_SLACK_WEBHOOK_URL") or os.environ.get("SLACK_WEBHOOK_URL")
    if not url:
        raise PostError("slack", "no webhook: set TRACEKIT_SLACK_WEBHOOK_URL (or SLACK_WEBHOOK_URL)")
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise PostError("slack", "the webhook URL is not an http(s) URL")
    # the URL is the secret: it appears in no message, only its host
    _request("POST", url, "slack", body=payload, secrets=(url, urllib.parse.urlsplit(url).path))
    return Posted("sent", None)
