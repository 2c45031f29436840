"""A controllable OpenAI-compatible streaming server on 127.0.0.1 for the load-driver tests.

Each request streams ``max_tokens`` one-word chunks: the first after ``first_token_s``, the next
ones every ``token_interval_s``. ``usage`` sends the usage chunk when the client asks for it
(``prompt_tokens`` = words + 1, so a test can tell it from the client's own word count).
``fail_every`` = k answers every k-th request (1-based) with HTTP 500; ``close_after`` = n closes
the connection after n chunks without ``[DONE]``; ``stall_s`` sleeps before the first byte.
``slow_every`` = k delays the first token of every k-th request by ``slow_first_token_s`` instead.
``hold``: an event every request waits for (at most 120 s) before its first byte, set by the test.
The server counts requests in flight and keeps the maximum, and records every request body.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Behaviour:
    first_token_s: float = 0.0
    token_interval_s: float = 0.0
    usage: bool = True
    fail_every: int = 0
    close_after: int | None = None
    stall_s: float = 0.0
    slow_every: int = 0
    slow_first_token_s: float = 0.0
    hold: threading.Event | None = None


@dataclass
class State:
    behaviour: Behaviour
    lock: threading.Lock = field(default_factory=threading.Lock)
    n_requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # chunked transfer encoding, as vLLM/SGLang stream

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_POST(self) -> None:
        st = self.server.state
        b = st.behaviour
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with st.lock:
            st.n_requests += 1
            n = st.n_requests
            st.bodies.append(body)
            st.in_flight += 1
            st.max_in_flight = max(st.max_in_flight, st.in_flight)
        self._left = False
        try:
            self._respond(n, body, b)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            self._leave()

    def _leave(self) -> None:
        """The request stops counting as in flight: just before its last bytes are written (the
        client may start its next request as soon as it reads them)."""
        if not self._left:
            self._left = True
            with self.server.state.lock:
                self.server.state.in_flight -= 1

    def _respond(self, n: int, body: dict[str, Any], b: Behaviour) -> None:
        if b.hold is not None:
            b.hold.wait(120)
        if b.stall_s:
            time.sleep(b.stall_s)
        if b.fail_every and n % b.fail_every == 0:
            msg = b'{"error": {"message": "overloaded"}}'
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            self._leave()
            self.wfile.write(msg)
            return
        chat = self.path.endswith("/chat/completions")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        first = b.slow_first_token_s if b.slow_every and n % b.slow_every == 0 else b.first_token_s
        n_out = int(body.get("max_tokens", 16))
        if chat:
            self._event({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
        time.sleep(first)
        for i in range(n_out):
            if b.close_after is not None and i == b.close_after:
                self.close_connection = True  # a crash: the socket closes mid-body, no [DONE]
                self._leave()
                return
            if i:
                time.sleep(b.token_interval_s)
            piece = f" w{i}"
            self._event({"choices": [{"index": 0, "delta": {"content": piece}} if chat else
                                     {"index": 0, "text": piece}]})
        self._event({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
        if b.usage and (body.get("stream_options") or {}).get("include_usage"):
            words = len(" ".join(str(m["content"]) for m in body["messages"]).split() if chat
                        else body["prompt"].split())
            self._event({"choices": [], "usage": {"prompt_tokens": words + 1, "completion_tokens": n_out}})
        self._leave()
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")

    def _event(self, doc: dict[str, Any]) -> None:
        self._chunk(b"data: " + json.dumps(doc).encode() + b"\n\n")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the driver's reachability check connects and closes without a request

    def __init__(self, state: State) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state


@contextmanager
def serve(behaviour: Behaviour | None = None) -> Iterator[tuple[str, State]]:
    """Run the server in a thread; yield (base URL, its state)."""
    state = State(behaviour or Behaviour())
    server = _Server(state)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
