"""Load client: streaming requests against an OpenAI-compatible endpoint, timed per token.

:func:`run_load` drives ``/v1/completions`` or ``/v1/chat/completions`` with ``"stream": true``
from N closed-loop workers (``concurrency``) or with Poisson arrivals (``rate_rps``) for
``duration_s`` seconds and returns one :class:`~tracekit.request_rows.RequestRecord` per request
(in a :class:`~tracekit.collectors.load.records.LoadResult`). docs/capture.md ("Load driver and
request metrics") documents the options and the definitions; in short:

* **TTFT** (ns): from just before the request is sent (connection set-up included) to the
  arrival of the first SSE chunk that carries generated text.
* **ITL** (ns list): the gaps between successive text-carrying chunks (one per token when the
  server streams token by token).
* **e2e** (ns): from just before the request is sent to the end of the stream (``data: [DONE]``).
* **Token counts**: the ``usage`` chunk the server sends when asked with
  ``stream_options: {"include_usage": true}`` (``token_count_source = "usage"``); without it,
  output tokens are the text-carrying chunks and prompt tokens the prompt's whitespace-separated
  words (``"counted"``).

Two load profiles: ``independent`` prompts (each request its own prompt), and ``agentic``
sessions: each of ``concurrency`` closed-loop clients runs multi-turn conversations in which
every turn re-sends the whole conversation so far (its first message, every answer, every new
message of ``turn_tokens``), waits ``think_s`` between turns, and every ``subagent_every``-th
turn fans out ``subagents`` parallel requests on the same context (their answers join it). A
server with a prefix cache serves the re-sent part from cache; the records carry the session and
turn, so TTFT can be read per turn (view ``ttft_by_turn``).

Only the standard library is used (threads, :mod:`http.client`); nothing but the given URL is
contacted.
"""

from __future__ import annotations

import http.client
import json
import math
import random
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from tracekit.collectors.load.http_target import HttpTarget, http_target
from tracekit.collectors.load.prompts import VOCAB, LengthDist, Prompt, parse_length_dist, read_prompts
from tracekit.collectors.load.records import LoadResult
from tracekit.errors import LoadInputError
from tracekit.request_rows import RequestRecord

Endpoint = Literal["completions", "chat"]
#: ``independent`` prompts, or ``agentic`` multi-turn sessions (module docstring).
LoadProfile = Literal["independent", "agentic"]

#: How often run_load calls ``on_progress`` (s).
PROGRESS_INTERVAL_S = 0.5



# --------------------------------------------------------------------------------------------
# Inputs


@dataclass
class LoadSpec:
    """What load to apply.

    ``url``: the server (``http://host:port``), its ``/v1`` root or the full endpoint path.
    ``duration_s``: seconds during which new requests are started; requests in flight at the end
    run to completion (bounded by ``timeout_s``). ``concurrency``: closed-loop workers, each sending
    its next request when the previous one ends. ``rate_rps``: Poisson arrivals at this mean rate
    (requests/s), open loop; with ``concurrency`` too, at most that many are in flight (an arrival
    waits for a slot). ``prompts_file``: one prompt per line, or JSONL with ``prompt`` or
    ``messages`` and optional ``max_tokens``; else prompts are generated with ``prompt_tokens``
    words drawn from :data:`VOCAB` (a distribution spec, see :func:`parse_length_dist`).
    ``max_tokens``: output tokens asked per request (a JSONL line's own value wins). ``model``:
    sent as ``model``; None asks ``GET /v1/models`` once and uses its first id (omitted if that
    fails). ``timeout_s``: per request, from send to end of stream (s). ``seed``: seeds prompt
    lengths, prompt words and arrival times. ``extra_body``: merged into every request body
    (e.g. ``{"ignore_eos": True}`` for vLLM/SGLang, ``{"temperature": 0}``).

    ``prompt_offset``: the prompts file's prompt the first request sends (then the next ones,
    cycling): a sweep's later points go on where the previous one ended.

    ``profile``: ``independent`` (above) or ``agentic``: ``concurrency`` clients each run
    sessions of ``turns`` turns. Every session starts with the same ``system_tokens`` words (a
    system prompt and tool definitions, shared across sessions as an agent's are), then its first
    message of ``prompt_tokens`` words; each later turn appends the previous answer and a new
    message of ``turn_tokens`` words (a distribution spec) to the conversation and sends all of it;
    ``think_s`` seconds pass between a turn's answer and the next turn; every
    ``subagent_every``-th turn (the ``subagent_every − 1``-th, … from 0) first sends ``subagents``
    requests at once, each a fresh context (the system prompt and its own task of ``turn_tokens``
    words, as a sub-agent starts), and their answers join the turn's message as its results.
    Agentic load is closed-loop only (no ``rate_rps``, no ``prompts_file``).
    """

    url: str
    duration_s: float
    concurrency: int | None = None
    rate_rps: float | None = None
    prompts_file: Path | None = None
    prompt_tokens: str = "fixed:128"
    max_tokens: int = 128
    model: str | None = None
    endpoint: Endpoint = "completions"
    timeout_s: float = 60.0
    seed: int = 0
    extra_body: Mapping[str, Any] | None = None
    prompt_offset: int = 0
    profile: LoadProfile = "independent"
    system_tokens: int = 0
    turns: int = 8
    turn_tokens: str = "fixed:64"
    think_s: float = 0.0
    subagents: int = 0
    subagent_every: int = 4


def _target(url: str, endpoint: Endpoint) -> HttpTarget:
    """The server of ``url`` with the path of ``endpoint`` (``…/v1/completions`` or
    ``…/v1/chat/completions``) unless the URL already names one."""
    t = http_target(url)
    path = t.path
    suffix = "/completions" if endpoint == "completions" else "/chat/completions"
    if not path.endswith(("/completions", "/chat/completions")):
        path = (path if path.endswith("/v1") else path + "/v1") + suffix
    return replace(t, path=path)


def wait_for_endpoint(url: str, timeout_s: float = 60.0, stop: threading.Event | None = None) -> None:
    """Wait until the server at ``url`` accepts a TCP connection (polls every 0.1 s).

    Raises :class:`LoadInputError` (``<url>: server unreachable ...``) after ``timeout_s``
    seconds, or when ``stop`` is set."""
    t = _target(url, "completions")
    deadline = time.monotonic() + timeout_s
    last = "no attempt"
    while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
        try:
            with socket.create_connection((t.host, t.port), timeout=min(2.0, timeout_s)):
                return
        except OSError as exc:
            last = exc.strerror or str(exc)
        time.sleep(0.1)
    raise LoadInputError(url, f"server unreachable after {timeout_s:g} s ({last})")


def _served_model(t: HttpTarget, timeout_s: float) -> str | None:
    """The first model id of ``GET /v1/models``, or None."""
    root = t.path
    root = root[: root.rfind("/v1/") + 3] if "/v1/" in root else "/v1"
    conn = t.connect(min(timeout_s, 10.0))
    try:
        conn.request("GET", root + "/models", headers={"Accept": "application/json"})
        resp = conn.getresponse()
        body = resp.read(1 << 20)
        if resp.status != 200:
            return None
        data = json.loads(body).get("data") or []
        ident = data[0].get("id") if data and isinstance(data[0], dict) else None
        return ident if isinstance(ident, str) else None
    except (OSError, http.client.HTTPException, ValueError, AttributeError):
        return None  # the model is optional: a server without /v1/models gets none
    finally:
        conn.close()


# --------------------------------------------------------------------------------------------
# The driver


@dataclass(frozen=True)
class LoadProgress:
    """Where a running load stands: ``elapsed_s`` since it started, requests ``sent`` and
    ``requests_done`` (ended, with or without error), ``errors``, ``in_flight``, and the
    ``output_tokens`` of the ended requests."""

    elapsed_s: float
    requests_done: int
    errors: int
    output_tokens: int
    requests_sent: int
    in_flight: int


class _Cancelled(Exception):
    """The request was cut off by the stop event."""


@dataclass
class _Stream:
    """What one streamed answer gave: time to the first text chunk and between chunks (ns, from
    the request's start), the usage object, the number of text chunks, or why it failed."""

    ttft: int | None = None
    itl: list[int] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    chunks: int = 0
    error: str | None = None
    text: list[str] = field(default_factory=list)

    def read(self, resp: http.client.HTTPResponse, t0: int, timeout: float) -> None:
        """Read SSE ``data:`` lines until ``[DONE]``, a failure or ``timeout`` seconds after ``t0``."""
        last = t0
        while line := resp.readline():
            if time.perf_counter_ns() - t0 > timeout * 1e9:
                self.error = f"timed out after {timeout:g} s"
                return
            if not line.startswith(b"data:"):
                continue  # blank separators, ": comments", "event:" lines
            payload = line[5:].strip()
            if payload == b"[DONE]":
                return
            obj = self._event(payload)
            if self.error is not None:
                return
            if obj is None:
                continue
            if isinstance(obj.get("usage"), dict):
                self.usage = obj["usage"]
            pieces = [t for c in obj.get("choices") or () if (t := _chunk_text(c))]
            if pieces:
                self.text.extend(pieces)
                now = time.perf_counter_ns()
                if self.ttft is None:
                    self.ttft = now - t0
                else:
                    self.itl.append(now - last)
                last = now
                self.chunks += 1
        self.error = f"stream ended before data: [DONE] ({self.chunks} text chunks received)"

    def _event(self, payload: bytes) -> dict[str, Any] | None:
        """One SSE data object; None for one that is not an object; sets ``error`` for malformed
        JSON or a server error in the stream."""
        try:
            obj = json.loads(payload)
        except ValueError:
            self.error = f"malformed SSE data: {payload[:120].decode('utf-8', 'replace')}"
            return None
        if not isinstance(obj, dict):
            return None
        if obj.get("error"):
            err = obj["error"]
            self.error = ("server error in stream: "
                          + str(err.get("message", err) if isinstance(err, dict) else err)[:300])
            return None
        return obj


class _Run:
    """State shared by the workers of one :func:`run_load` call."""

    def __init__(self, spec: LoadSpec, target: HttpTarget, prompts: list[Prompt] | None,
                 dist: LengthDist | None, model: str | None, cancel: threading.Event) -> None:
        self.spec, self.target, self.prompts, self.dist, self.model = spec, target, prompts, dist, model
        self.cancel = cancel
        self.lock = threading.Lock()
        self.rng = random.Random(spec.seed)
        self.next_id = 0
        self.records: list[RequestRecord] = []
        self.cancelled = 0
        self.errors = 0
        self.tokens = 0
        self.in_flight: set[http.client.HTTPConnection] = set()
        self.next_session = 0
        # the agentic profile's system prompt, the same words for every session of the load
        sys_rng = random.Random(spec.seed * 7 + 3)
        self.system = " ".join(sys_rng.choices(VOCAB, k=spec.system_tokens)) if spec.system_tokens else ""

    # prompts -------------------------------------------------------------------------------
    def next_prompt(self) -> tuple[int, Prompt]:
        with self.lock:
            rid = self.next_id
            self.next_id += 1
            if self.prompts is not None:
                return rid, self.prompts[(rid + self.spec.prompt_offset) % len(self.prompts)]
            assert self.dist is not None
            n = self.dist.sample(self.rng)
            words = self.rng.choices(VOCAB, k=n)
        return rid, Prompt(" ".join(words), None, None, n)

    def body(self, p: Prompt) -> bytes:
        spec = self.spec
        doc: dict[str, Any] = {}
        if self.model is not None:
            doc["model"] = self.model
        if spec.endpoint == "chat":
            doc["messages"] = list(p.messages) if p.messages is not None else [{"role": "user", "content": p.text}]
        else:
            doc["prompt"] = p.text if p.text is not None else "\n".join(
                str(m.get("content") or "") for m in p.messages or ())
        doc.update(max_tokens=p.max_tokens or spec.max_tokens, stream=True,
                   stream_options={"include_usage": True})
        doc.update(spec.extra_body or {})
        return json.dumps(doc).encode()

    # one request ---------------------------------------------------------------------------
    def request(self) -> None:
        rid, prompt = self.next_prompt()
        self._record(rid, prompt)

    def _record(self, rid: int, prompt: Prompt, session: int | None = None,
                turn: int | None = None) -> tuple[RequestRecord, str] | None:
        """Send one request and keep its record; (record, answer text), or None when cancelled."""
        try:
            rec, text = self._send(rid, prompt, session, turn)
        except _Cancelled:
            with self.lock:
                self.cancelled += 1
            return None
        with self.lock:
            self.records.append(rec)
            self.errors += rec.error is not None
            self.tokens += rec.output_tokens
        return rec, text

    # agentic sessions ----------------------------------------------------------------------
    def _words(self, rng: random.Random, dist: LengthDist) -> str:
        return " ".join(rng.choices(VOCAB, k=dist.sample(rng)))

    def _rid(self) -> int:
        with self.lock:
            rid = self.next_id
            self.next_id += 1
        return rid

    def session(self, going: Callable[[], bool], pause: Callable[[float], None]) -> None:
        """One multi-turn session (the agentic profile, :class:`LoadSpec`): turns while ``going()``;
        ``pause(s)`` waits the think time (and returns early when the load ends)."""
        spec = self.spec
        assert self.dist is not None
        with self.lock:
            sid = self.next_session
            self.next_session += 1
        rng = random.Random(spec.seed * 1_000_003 + sid)  # a session's words do not depend on timing
        turn_dist = parse_length_dist(spec.turn_tokens)
        # the conversation: messages and answers, in order, user and assistant alternating
        parts = [self._words(rng, self.dist)]
        roles = ["user"]
        if self.system:
            parts.insert(0, self.system)
            roles.insert(0, "system")
        for turn in range(spec.turns):
            if not going():
                return
            if turn:
                parts.append(self._words(rng, turn_dist))
                roles.append("user")
            if spec.subagents and turn % spec.subagent_every == spec.subagent_every - 1:
                tasks = [self._words(rng, turn_dist) for _ in range(spec.subagents)]
                answers = self._burst(tasks, sid, turn)
                if answers is None:
                    return
                parts[-1] = " ".join([parts[-1], *answers])  # the sub-agents' results join the message
            got = self._record(self._rid(), self._conversation(parts, roles), sid, turn)
            if got is None or got[0].error is not None:
                return  # a failed turn ends its session (its context is lost)
            parts.append(got[1])
            roles.append("assistant")
            if spec.think_s and turn + 1 < spec.turns:
                pause(spec.think_s)

    def _burst(self, tasks: list[str], sid: int, turn: int) -> list[str] | None:
        """Sub-agent requests sent at once, each a fresh context: the shared system prompt and its
        task; their answers (None when one was cancelled or failed)."""
        results: list[tuple[RequestRecord, str] | None] = [None] * len(tasks)
        head, head_roles = ([self.system], ["system"]) if self.system else ([], [])

        def one(i: int) -> None:
            prompt = self._conversation([*head, tasks[i]], [*head_roles, "user"])
            results[i] = self._record(self._rid(), prompt, sid, turn)

        threads = [threading.Thread(target=one, args=(i,), name=f"tracekit-subagent-{i}", daemon=True)
                   for i in range(len(tasks))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if any(r is None or r[0].error is not None for r in results):
            return None
        return [r[1] for r in results if r is not None]

    def _conversation(self, parts: list[str], roles: list[str]) -> Prompt:
        """The conversation as one prompt: for completions its parts joined by spaces (each turn's
        prompt extends the previous one, so a prefix cache can serve it), for chat as messages."""
        words = sum(len(p.split()) for p in parts)
        if self.spec.endpoint == "chat":
            return Prompt(None, tuple({"role": r, "content": p} for r, p in zip(roles, parts, strict=True)),
                          None, words)
        return Prompt(" ".join(parts), None, None, words)

    def _send(self, rid: int, prompt: Prompt, session: int | None = None,
              turn: int | None = None) -> tuple[RequestRecord, str]:
        timeout = self.spec.timeout_s
        body = self.body(prompt)
        conn = self.target.connect(timeout)
        got = _Stream()
        status: int | None = None
        with self.lock:
            self.in_flight.add(conn)
        start_ns = time.time_ns()
        t0 = time.perf_counter_ns()
        try:
            if self.cancel.is_set():
                raise _Cancelled
            conn.request("POST", self.target.request_path(), body=body, headers={
                "Content-Type": "application/json", "Accept": "text/event-stream"})
            resp = conn.getresponse()
            status = resp.status
            if status != 200:
                text = resp.read(2000).decode("utf-8", "replace").strip()
                got.error = f"HTTP {status}: {' '.join(text.split())[:300] or resp.reason}"
            else:
                got.read(resp, t0, timeout)
        except (OSError, http.client.HTTPException) as exc:
            if self.cancel.is_set():
                raise _Cancelled from None
            if isinstance(exc, TimeoutError | socket.timeout):
                got.error = f"timed out after {timeout:g} s (no data)"
            else:
                got.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        finally:
            end = time.perf_counter_ns()
            with self.lock:
                self.in_flight.discard(conn)
            conn.close()
        if self.cancel.is_set() and got.error is not None:
            raise _Cancelled
        n_out, n_prompt = _usage_counts(got.usage)
        return RequestRecord(
            request_id=rid,
            start_ns=start_ns,
            ttft_ns=got.ttft,
            itl_ns=got.itl,
            e2e_ns=end - t0,
            prompt_tokens=n_prompt if n_prompt is not None else prompt.est_tokens,
            output_tokens=n_out if n_out is not None else got.chunks,
            status=status,
            error=got.error,
            token_count_source="usage" if n_out is not None else "counted",
            session_id=session,
            turn=turn,
            cached_tokens=_cached_tokens(got.usage),
        ), "".join(got.text)

    def abort_in_flight(self) -> None:
        """Shut down the sockets of the requests in flight (their reads return at once)."""
        with self.lock:
            conns = list(self.in_flight)
        for conn in conns:
            sock = conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed by its worker

    def progress(self, t0: float, sent: int) -> LoadProgress:
        with self.lock:
            return LoadProgress(time.monotonic() - t0, len(self.records), self.errors, self.tokens,
                                sent, len(self.in_flight))


def _chunk_text(choice: Any) -> str:
    if not isinstance(choice, dict):
        return ""
    text = choice.get("text")
    if not text and isinstance(choice.get("delta"), dict):
        text = choice["delta"].get("content")
    return text if isinstance(text, str) else ""


def _usage_counts(usage: Mapping[str, Any] | None) -> tuple[int | None, int | None]:
    if not usage:
        return None, None
    out, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
    return (out if _count(out) else None), (prompt if _count(prompt) else None)


def _cached_tokens(usage: Mapping[str, Any] | None) -> int | None:
    """``usage.prompt_tokens_details.cached_tokens`` (vLLM, SGLang and OpenAI report prefix-cache
    hits so), or None."""
    details = (usage or {}).get("prompt_tokens_details")
    v = details.get("cached_tokens") if isinstance(details, dict) else None
    return v if _count(v) else None


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def check_spec(spec: LoadSpec) -> tuple[list[Prompt] | None, LengthDist | None]:
    """Validate ``spec`` without contacting the server; return the prompts file's prompts or the
    length distribution. Raises :class:`LoadInputError` (one line: what, and why)."""
    _target(spec.url, spec.endpoint)
    if spec.endpoint not in ("completions", "chat"):
        raise LoadInputError(spec.endpoint, "endpoint must be 'completions' or 'chat'")
    if spec.concurrency is None and spec.rate_rps is None:
        raise LoadInputError(spec.url, "give a concurrency (closed-loop workers) or a request rate (req/s)")
    if spec.concurrency is not None and spec.concurrency < 1:
        raise LoadInputError(spec.url, f"concurrency must be ≥ 1, got {spec.concurrency}")
    if spec.rate_rps is not None and not (spec.rate_rps > 0 and math.isfinite(spec.rate_rps)):
        raise LoadInputError(spec.url, f"request rate must be > 0 req/s, got {spec.rate_rps}")
    if not (spec.duration_s > 0 and math.isfinite(spec.duration_s)):
        raise LoadInputError(spec.url, f"duration must be > 0 s, got {spec.duration_s}")
    if spec.max_tokens < 1:
        raise LoadInputError(spec.url, f"max_tokens must be ≥ 1, got {spec.max_tokens}")
    if not spec.timeout_s > 0:
        raise LoadInputError(spec.url, f"timeout must be > 0 s, got {spec.timeout_s}")
    _check_profile(spec)
    if spec.prompts_file is not None:
        return read_prompts(spec.prompts_file), None
    return None, parse_length_dist(spec.prompt_tokens)


def _check_profile(spec: LoadSpec) -> None:
    """The load profile's own settings (:func:`check_spec`)."""
    if spec.profile not in ("independent", "agentic"):
        raise LoadInputError(spec.profile, "load profile must be 'independent' or 'agentic'")
    if spec.profile == "agentic":
        if spec.rate_rps is not None or spec.concurrency is None:
            raise LoadInputError(spec.url, "the agentic profile runs closed-loop sessions: give a concurrency "
                                           "(sessions at once), not a request rate")
        if spec.prompts_file is not None:
            raise LoadInputError(spec.prompts_file, "the agentic profile generates its conversations: "
                                                    "no prompts file")
        if spec.system_tokens < 0 or spec.prompt_offset < 0:
            raise LoadInputError(spec.url, "system tokens and the prompt offset must be ≥ 0")
        if spec.turns < 1:
            raise LoadInputError(spec.url, f"turns must be ≥ 1, got {spec.turns}")
        if not (spec.think_s >= 0 and math.isfinite(spec.think_s)):
            raise LoadInputError(spec.url, f"think time must be ≥ 0 s, got {spec.think_s}")
        if spec.subagents < 0 or spec.subagent_every < 1:
            raise LoadInputError(spec.url, f"sub-agents must be ≥ 0 and their period ≥ 1 turn, got "
                                           f"{spec.subagents} every {spec.subagent_every}")
        parse_length_dist(spec.turn_tokens)


class _Driver:
    """Starts the requests of one load (a closed loop per concurrency slot, or Poisson arrivals
    at ``rate_rps``) until the duration ends or ``finish``/``stop`` is set, then waits for the
    requests in flight; reports progress every :data:`PROGRESS_INTERVAL_S` seconds."""

    def __init__(self, spec: LoadSpec, run: _Run, stop: threading.Event, finish: threading.Event,
                 on_progress: Callable[[LoadProgress], None] | None) -> None:
        self.spec, self.run, self.stop, self.finish, self.on_progress = spec, run, stop, finish, on_progress
        self.slots = threading.BoundedSemaphore(spec.concurrency) if spec.concurrency else None
        self.threads: list[threading.Thread] = []
        self.t0 = time.monotonic()
        self.t0_ns = time.time_ns()
        self.deadline = self.t0 + spec.duration_s
        #: open loop: each request's scheduled arrival (Unix ns), sent or still waiting for a slot
        self.arrivals_ns: list[int] = []
        self.next_report = self.t0

    def _going(self) -> bool:
        return not self.stop.is_set() and not self.finish.is_set() and time.monotonic() < self.deadline

    def _pause(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while self._going() and time.monotonic() < end:
            self.stop.wait(min(0.05, max(0.0, end - time.monotonic())))

    def _closed_loop(self) -> None:
        while self._going():
            if self.spec.profile == "agentic":
                self.run.session(self._going, self._pause)
            else:
                self.run.request()

    def _arrival(self) -> None:
        if self.slots is not None:
            while not self.slots.acquire(timeout=0.05):
                if self.stop.is_set():
                    return
        try:
            if not self.stop.is_set() and not self.finish.is_set():
                self.run.request()
        finally:
            if self.slots is not None:
                self.slots.release()

    def _spawn(self, fn: Callable[[], None]) -> None:
        th = threading.Thread(target=fn, name=f"tracekit-load-{len(self.threads)}", daemon=True)
        self.threads.append(th)
        th.start()

    def _report(self, now: float) -> None:
        if self.on_progress is not None and now >= self.next_report:
            self.on_progress(self.run.progress(self.t0, self.run.next_id))
            self.next_report = now + PROGRESS_INTERVAL_S

    def pace(self) -> None:
        """Start requests until the duration ends or ``finish``/``stop`` is set."""
        spec = self.spec
        arrivals = random.Random(spec.seed + 1)
        if spec.rate_rps is None:
            for _ in range(spec.concurrency or 1):
                self._spawn(self._closed_loop)
        next_arrival = self.t0 + (arrivals.expovariate(spec.rate_rps) if spec.rate_rps else math.inf)
        while not self.stop.is_set() and not self.finish.is_set():
            now = time.monotonic()
            # every arrival due by now (and inside the duration) leaves, even after a late wake-up
            while spec.rate_rps and next_arrival <= min(now, self.deadline):
                self.arrivals_ns.append(self.t0_ns + int((next_arrival - self.t0) * 1e9))
                self._spawn(self._arrival)
                next_arrival += arrivals.expovariate(spec.rate_rps)
            if now >= self.deadline:
                break
            self._report(now)
            # short waits: ``finish`` (like ``stop``) must end the arrivals promptly
            self.stop.wait(min(0.02, max(0.0, min(next_arrival, self.deadline, self.next_report) - time.monotonic())))

    def drain(self) -> None:
        """Requests in flight run to their end unless ``stop`` is (or gets) set; a last report."""
        for th in self.threads:
            while th.is_alive():
                if self.stop.is_set():
                    self.run.cancel.set()
                    self.run.abort_in_flight()
                th.join(timeout=0.05)
                self._report(time.monotonic())
        if self.on_progress is not None:
            self.on_progress(self.run.progress(self.t0, self.run.next_id))


def run_load(
    spec: LoadSpec,
    stop: threading.Event | None = None,
    on_progress: Callable[[LoadProgress], None] | None = None,
    finish: threading.Event | None = None,
) -> LoadResult:
    """Apply the load of ``spec`` and return every request's record (blocking).

    New requests start during ``spec.duration_s`` seconds; requests in flight then run to their
    end (each bounded by ``spec.timeout_s``). Setting ``finish`` ends the load early the same
    way: no new requests, the in-flight ones complete and are recorded (``tracekit capture``
    closes its window so). Setting ``stop`` ends it abruptly: no new requests, the in-flight ones
    are cut off (counted in ``LoadResult.cancelled``, not recorded) and the function returns
    within about a second. ``on_progress`` is called from the calling
    thread every :data:`PROGRESS_INTERVAL_S` seconds and once at the end.

    Raises :class:`LoadInputError` for a bad spec (see :func:`check_spec`) or when the server
    does not accept a TCP connection; per-request failures (HTTP errors, broken streams,
    timeouts) are recorded in :attr:`RequestRecord.error` instead.
    """
    prompts, dist = check_spec(spec)
    target = _target(spec.url, spec.endpoint)
    try:
        socket.create_connection((target.host, target.port), timeout=min(spec.timeout_s, 10.0)).close()
    except OSError as exc:
        raise LoadInputError(spec.url, f"server unreachable: {exc.strerror or exc}") from None
    model = spec.model if spec.model is not None else _served_model(target, spec.timeout_s)
    run = _Run(spec, target, prompts, dist, model, threading.Event())
    driver = _Driver(spec, run, stop or threading.Event(), finish or threading.Event(), on_progress)
    started_ns = time.time_ns()
    driver.pace()
    driver.drain()
    records = sorted(run.records, key=lambda r: r.request_id)
    ended_ns = max((r.start_ns + r.e2e_ns for r in records), default=time.time_ns())
    notes = []
    if prompts is not None and run.next_id > len(prompts):
        notes.append(f"the prompts file's {len(prompts)} prompts were sent {run.next_id / len(prompts):.1f} times "
                     "over: a server's prefix cache serves the repeats (give more prompts for a cold-cache load)")
    return LoadResult(spec=spec, started_ns=started_ns, ended_ns=max(ended_ns, started_ns), records=records,
                      cancelled=run.cancelled, model=model, notes=notes, arrivals_ns=driver.arrivals_ns)
