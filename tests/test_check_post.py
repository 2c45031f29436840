"""`tracekit check --post github|slack` against real HTTP servers on 127.0.0.1 started by the test:
what they receive (method, path, auth header, body), update-instead-of-create, and that secrets
never reach stdout or stderr."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from helpers import distinct_copies, run_cli

from tracekit.analysis.base import ANALYZERS, Analyzer, AnalyzerResult, Metric, analyze_run
from tracekit.ingest import ingest
from tracekit.store import open_store

TOKEN = "ghp_s3cr3tT0kenValue0123456789"
SLACK_PATH = "/services/T000/B000/xoxSecretHookPart"


class FakeGitHub:
    """The three GitHub REST calls the poster makes, on an in-memory list of comments."""

    def __init__(self, status: int = 200) -> None:
        self.requests: list[dict[str, Any]] = []
        self.comments: list[dict[str, Any]] = [{"id": 11, "body": "LGTM", "user": {"login": "someone"}}]
        self.status = status
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                outer.requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers),
                                       "body": body})
                if outer.status != 200:
                    return self._send(outer.status, {"message": "Bad credentials"})
                if self.command == "GET":
                    return self._send(200, outer.comments)
                if self.command == "POST":
                    c = {"id": 100 + len(outer.comments), "body": body["body"],
                         "html_url": f"https://github.example/o/r/pull/7#issuecomment-{100 + len(outer.comments)}"}
                    outer.comments.append(c)
                    return self._send(201, c)
                if self.command == "PATCH":
                    cid = int(self.path.rsplit("/", 1)[1])
                    c = next(c for c in outer.comments if c["id"] == cid)
                    c["body"] = body["body"]
                    return self._send(200, {**c, "html_url": f"https://github.example/o/r/pull/7#issuecomment-{cid}"})
                return self._send(405, {"message": "no"})

            do_GET = do_POST = do_PATCH = _handle

            def _send(self, code: int, doc: Any) -> None:
                data = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    gh = FakeGitHub()
    yield gh
    gh.close()


class _Latency(Analyzer):
    values: ClassVar[dict[str, float]] = {}

    def analyze(self, con: Any, run_id: str) -> AnalyzerResult:
        return AnalyzerResult(metrics=[Metric("post_latency_ms", self.values[run_id], "ms", "lower")])


@pytest.fixture
def runs(tmp_path: Path, store: Path) -> Iterator[tuple[list[str], list[str]]]:
    ANALYZERS["post_test"] = _Latency
    ids = []
    try:
        values = [100, 101, 99, 100.5, 99.5, 110, 111, 109, 110.5, 112]
        for p, v in zip(distinct_copies(tmp_path, len(values)), values, strict=True):
            rid = ingest([p], store)[0].run_id
            _Latency.values[rid] = float(v)
            ids.append(rid)
        with open_store(store) as con:
            for rid in ids:
                analyze_run(con, rid, ["post_test"])
        yield ids[:5], ids[5:]
    finally:
        ANALYZERS.pop("post_test", None)


def _check(store: Path, tmp_path: Path, base: list[str], cand: list[str], *extra: str,
           env: dict[str, str]) -> Any:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[metrics.post_latency_ms]\n")
    args = ["check", "--store", str(store), "--config", str(cfg), *extra]
    for c in cand:
        args += ["--candidate", c]
    for b in base:
        args += ["--baseline", b]
    return run_cli(*args, env=env)


def test_github_comment_created_then_updated(tmp_path: Path, store: Path, runs: tuple[list[str], list[str]],
                                             github: FakeGitHub) -> None:
    base, cand = runs
    env = {"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": github.url, "GITHUB_REPOSITORY": "octo/infer",
           "GITHUB_REF": "refs/pull/7/merge"}
    r = _check(store, tmp_path, base, cand, "--post", "github", env=env)
    assert r.returncode == 1, r.stderr  # a regression, and the comment is posted
    assert TOKEN not in r.stdout + r.stderr
    assert "github: comment created (https://github.example/o/r/pull/7#issuecomment-101)" in r.stderr
    get, post = github.requests
    assert (get["method"], get["path"]) == ("GET", "/repos/octo/infer/issues/7/comments?per_page=100&page=1")
    assert (post["method"], post["path"]) == ("POST", "/repos/octo/infer/issues/7/comments")
    for req in github.requests:
        assert req["headers"]["Authorization"] == f"Bearer {TOKEN}"
        assert req["headers"]["Accept"] == "application/vnd.github+json"
    body = post["body"]["body"]
    assert body == r.stdout  # the markdown printed is the markdown posted
    assert body.startswith("<!-- tracekit-check -->\n## tracekit check: 🔴 1 regression")
    assert "| post_latency_ms | lower | 100 ms (n=5) | 110.5 ms (n=5) | +10.5 % | 0.00397 | 2% | 🔴 regression |" in body

    # the second check updates the same comment instead of adding one (PR number from --pr this time)
    env2 = {k: v for k, v in env.items() if k != "GITHUB_REF"}
    r2 = _check(store, tmp_path, base, cand[:4], "--post", "github", "--pr", "7", env=env2)
    assert r2.returncode == 1 and TOKEN not in r2.stdout + r2.stderr
    assert "github: comment updated" in r2.stderr
    assert [q["method"] for q in github.requests] == ["GET", "POST", "GET", "PATCH"]
    assert github.requests[3]["path"] == "/repos/octo/infer/issues/comments/101"
    assert len(github.comments) == 2  # "LGTM" and one tracekit comment
    assert "(n=4)" in github.comments[1]["body"] and "(n=5)" in github.comments[1]["body"]

    # another key keeps its own comment
    r3 = _check(store, tmp_path, base, cand, "--post", "github", "--comment-key", "decode-bs8", env=env)
    assert r3.returncode == 1 and len(github.comments) == 3
    assert github.comments[2]["body"].startswith("<!-- tracekit-check:decode-bs8 -->")


def test_github_errors_keep_the_token_secret(tmp_path: Path, store: Path, runs: tuple[list[str], list[str]]) -> None:
    base, cand = runs
    gh = FakeGitHub(status=401)
    try:
        env = {"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": gh.url, "GITHUB_REPOSITORY": "octo/infer"}
        r = _check(store, tmp_path, base, cand, "--post", "github", "--pr", "7", env=env)
        assert r.returncode == 2
        assert r.stderr.strip().splitlines() == [
            "error: github octo/infer#7: GET /repos/octo/infer/issues/7/comments failed: HTTP 401: Bad credentials"]
        assert TOKEN not in r.stdout + r.stderr
        assert gh.requests[0]["headers"]["Authorization"] == f"Bearer {TOKEN}"  # it was sent, not shown
    finally:
        gh.close()
    no_token = _check(store, tmp_path, base, cand, "--post", "github", "--pr", "7",
                      env={"GITHUB_TOKEN": "", "GITHUB_REPOSITORY": "octo/infer"})
    assert no_token.returncode == 2
    assert no_token.stderr.strip() == "error: github: no token: set GITHUB_TOKEN (or TRACEKIT_GITHUB_TOKEN)"
    no_pr = _check(store, tmp_path, base, cand, "--post", "github",
                   env={"GITHUB_TOKEN": TOKEN, "GITHUB_REPOSITORY": "octo/infer", "GITHUB_REF": "refs/heads/main",
                        "GITHUB_EVENT_PATH": ""})
    assert no_pr.returncode == 2 and "no pull request number" in no_pr.stderr and TOKEN not in no_pr.stderr


class FakeSlack:
    def __init__(self, status: int = 200) -> None:
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                outer.requests.append({"path": self.path, "headers": dict(self.headers),
                                       "body": json.loads(self.rfile.read(length))})
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{SLACK_PATH}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_slack_webhook(tmp_path: Path, store: Path, runs: tuple[list[str], list[str]]) -> None:
    base, cand = runs
    slack = FakeSlack()
    try:
        r = _check(store, tmp_path, base, cand, "--post", "slack", "--dashboard-url", "http://dash.example:8050",
                   env={"TRACEKIT_SLACK_WEBHOOK_URL": slack.url})
        assert r.returncode == 1 and "slack: message sent" in r.stderr
        assert SLACK_PATH not in r.stdout + r.stderr
        (req,) = slack.requests
        assert req["path"] == SLACK_PATH and req["headers"]["Content-Type"] == "application/json"
        doc = req["body"]
        assert doc["text"] == ":red_circle: tracekit check: 1 regression(s)"
        text = "\n".join(b["text"]["text"] for b in doc["blocks"])
        assert "*post_latency_ms* 100 ms → 110.5 ms (+10.5 %, p 0.00397)" in text
        assert f"<http://dash.example:8050/compare?a={base[2]}" in text or "compare?a=" in text
    finally:
        slack.close()
    failing = FakeSlack(status=404)
    try:
        r = _check(store, tmp_path, base, cand, "--post", "slack", env={"SLACK_WEBHOOK_URL": failing.url})
        assert r.returncode == 2
        origin = failing.url.removesuffix(SLACK_PATH)  # the webhook's host is shown, its path never
        assert r.stderr.strip() == f"error: slack: POST {origin}/*** failed: HTTP 404"
        assert SLACK_PATH not in r.stdout + r.stderr and "xoxSecret" not in r.stderr
    finally:
        failing.close()
