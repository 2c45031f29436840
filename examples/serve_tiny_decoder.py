#!/usr/bin/env python
"""A tiny CPU decoder behind an OpenAI-compatible streaming completions server (stdlib HTTP).

    python examples/serve_tiny_decoder.py --port 8000
    # prints "listening on http://127.0.0.1:8000" when ready

The model is the bundled samples' decoder-only transformer (``tools/make_samples.py``:
2 layers, d_model 128, vocabulary 512, random seeded weights, nothing downloaded) with a longer
context (1,024 positions). ``--engine jax`` serves the JAX samples' decoder instead
(``tools/make_jax_sample.py``: jitted ``prefill`` and ``decode_step``, 128 positions):
``prefill`` compiles once per prompt length, or once per bucket (16/32/64) with ``--buckets``.
Each request runs a real prefill of its prompt and then one decode step per output
token with its own KV cache, on the request's server thread (no batching), and streams every
token as it is produced:

* ``POST /v1/completions`` and ``POST /v1/chat/completions`` with ``"stream": true`` (SSE
  ``data: {...}`` chunks, ``data: [DONE]``); ``stream_options: {"include_usage": true}`` adds the
  usage chunk. Without ``stream`` the whole completion comes back as one JSON object.
* ``GET /v1/models`` (one model, ``tiny-decoder``), ``GET /health``.
* ``POST /start_profile`` and ``POST /stop_profile``, as vLLM and SGLang serve them, when the
  profiler directory is set in the environment (``VLLM_TORCH_PROFILER_DIR``, or
  ``SGLANG_TORCH_PROFILER_DIR``; SGLang's JSON body ``{"output_dir": ...}`` overrides it): the
  PyTorch profiler records every request thread between the two calls and ``stop_profile``
  writes ``<host>_<pid>.<ms>.pt.trace.json.gz`` there (``tensorboard_trace_handler``, as vLLM);
  with ``--engine jax``, ``jax.profiler`` writes ``plugins/profile/<session>/<host>.xplane.pb``.
  Without the variable both answer 404, as a vLLM started without it does.

Prompt words map to token ids by CRC-32 (one word = one token); the prompt keeps its last
``context − max_tokens`` tokens. There is no end-of-sequence token: every request produces exactly
``max_tokens`` tokens (capped at half the context), each streamed as ``" t<id>"``.
SIGTERM and SIGINT stop the server cleanly once the requests in flight have ended (atexit handlers, e.g.
an injected profiler, run).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

MODEL_NAME = "tiny-decoder"
CONTEXT = 1024  # tokens (torch engine)


class Engine:
    """The torch model and a greedy generator streaming one token per decode step."""

    name = "torch"

    def __init__(self, seed: int) -> None:
        import torch
        from make_samples import Config, KVCache, TinyDecoder

        self.torch = torch
        self.kv_cache = KVCache
        torch.manual_seed(seed)
        self.cfg = Config(max_seq_len=CONTEXT)
        self.context = CONTEXT
        self.model = TinyDecoder(self.cfg).eval()
        self.requests = 0
        self.lock = threading.Lock()

    def tokenize(self, text: str) -> list[int]:
        ids = [zlib.crc32(w.encode()) % self.cfg.vocab_size for w in text.split()]
        return ids or [0]

    def generate(self, prompt_ids: list[int], max_tokens: int) -> Iterator[int]:
        """Prefill, then yield ``max_tokens`` greedy tokens (the first from the prefill's logits)."""
        torch = self.torch
        with torch.inference_mode():
            cache = self.kv_cache(self.cfg, 1)
            tok = self.model(torch.tensor([prompt_ids]), cache).argmax(-1, keepdim=True)
            yield int(tok)
            for _ in range(max_tokens - 1):
                tok = self.model(tok, cache).argmax(-1, keepdim=True)
                yield int(tok)


class JaxEngine(Engine):
    """The JAX samples' decoder (``tools/make_jax_sample.py``: jitted ``prefill`` and
    ``decode_step``, random weights), KV cache of 128 positions. ``prefill`` compiles once per
    prompt length (``buckets=False``: compile churn under varied prompts) or once per bucket of
    ``make_jax_sample.BUCKETS`` (prompts right-padded)."""

    name = "jax"

    def __init__(self, seed: int, buckets: bool = False) -> None:
        import jax
        import make_jax_sample as mj

        self.jax = jax
        self.mj = mj
        self.cfg = mj.Config()
        self.context = self.cfg.max_seq_len
        self.params = mj.init_params(self.cfg, seed)
        self.buckets = buckets
        self.requests = 0
        self.lock = threading.Lock()

    def generate(self, prompt_ids: list[int], max_tokens: int) -> Iterator[int]:
        import numpy as np

        mj, n = self.mj, len(prompt_ids)
        t = next((b for b in mj.BUCKETS if b >= n), n) if self.buckets else n
        padded = np.zeros((1, t), np.int32)
        padded[0, :n] = prompt_ids
        tok, cache = mj.prefill(self.params, mj.empty_cache(self.cfg, 1), self.jax.device_put(padded),
                                np.int32(n), self.cfg)
        yield int(tok[0])
        for j in range(max_tokens - 1):
            tok, cache = mj.decode_step(self.params, cache, tok, np.int32(n + j), self.cfg)
            yield int(tok[0])


PROFILER_DIR_ENVS = ("VLLM_TORCH_PROFILER_DIR", "SGLANG_TORCH_PROFILER_DIR")


class Profiler:
    """The server-side profiler behind /start_profile and /stop_profile: the PyTorch profiler for
    the torch engine, ``jax.profiler`` (an XSpace per capture) for the JAX engine."""

    def __init__(self, out_dir: str | None, engine: Engine) -> None:
        self.out_dir = out_dir
        self.engine = engine
        self.prof: Any = None
        self.lock = threading.Lock()
        if out_dir and engine.name == "torch":
            import torch

            # Kineto must first be initialised on the thread that imported torch (this one); the
            # capture itself is started and stopped from request threads, recording all threads
            warm = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            warm.start()
            warm.stop()

    def start(self, out_dir: str | None) -> str:
        with self.lock:
            if self.prof is not None:
                return "already profiling"
            target = out_dir or self.out_dir
            assert target is not None
            if self.engine.name == "jax":
                import jax

                jax.profiler.start_trace(target)
                self.prof = "jax"
                return "profiling started"
            import torch
            from torch._C._profiler import _ExperimentalConfig

            acts = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            self.prof = torch.profiler.profile(
                activities=acts, record_shapes=True, with_flops=True,
                experimental_config=_ExperimentalConfig(profile_all_threads=True),
                on_trace_ready=torch.profiler.tensorboard_trace_handler(target, use_gzip=True),
            )
            self.prof.start()
            return "profiling started"

    def stop(self) -> str:
        with self.lock:
            if self.prof is None:
                return "not profiling"
            if self.prof == "jax":
                import jax

                jax.profiler.stop_trace()  # writes plugins/profile/<session>/<host>.xplane.pb
            else:
                self.prof.stop()  # on_trace_ready writes the trace before this returns
            self.prof = None
            return "profiling stopped"


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.0"  # the stream ends when the connection closes after [DONE]
    timeout = 30  # s: a connection that sends nothing is closed (shutdown waits for its thread)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, status: int, doc: dict[str, Any]) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": {"message": message, "type": "invalid_request_error"}})

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model", "owned_by": "tracekit"}]})
        elif self.path == "/health":
            self._json(200, {"status": "ok"})
        else:
            self._error(404, f"no route {self.path}")

    def _profile(self, start: bool) -> None:
        profiler = self.server.profiler
        if not profiler.out_dir:
            self._error(404, "profiler not enabled: set VLLM_TORCH_PROFILER_DIR or SGLANG_TORCH_PROFILER_DIR")
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            out_dir = (json.loads(body) or {}).get("output_dir") if body.strip() else None
        except (ValueError, AttributeError):
            out_dir = None
        self._json(200, {"message": profiler.start(out_dir) if start else profiler.stop()})

    def do_POST(self) -> None:
        if self.path.rstrip("/") in ("/start_profile", "/stop_profile"):
            self._profile(self.path.rstrip("/") == "/start_profile")
            return
        chat = self.path.rstrip("/") == "/v1/chat/completions"
        if not chat and self.path.rstrip("/") != "/v1/completions":
            self._error(404, f"no route {self.path}")
            return
        try:
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            if chat:
                text = "\n".join(str(m.get("content") or "") for m in req["messages"])
            else:
                text = req["prompt"] if isinstance(req["prompt"], str) else " ".join(map(str, req["prompt"]))
            max_tokens = int(req.get("max_tokens") or 16)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self._error(400, f"bad request: {exc}")
            return
        engine = self.server.engine
        max_tokens = max(1, min(max_tokens, engine.context // 2))
        ids = engine.tokenize(text)[-(engine.context - max_tokens):]
        with engine.lock:
            engine.requests += 1
            rid = f"{'chatcmpl' if chat else 'cmpl'}-{engine.requests}"
        usage = {"prompt_tokens": len(ids), "completion_tokens": max_tokens,
                 "total_tokens": len(ids) + max_tokens}
        base = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": MODEL_NAME}
        if not req.get("stream"):
            out = "".join(f" t{t}" for t in engine.generate(ids, max_tokens))
            choice = ({"index": 0, "message": {"role": "assistant", "content": out}} if chat
                      else {"index": 0, "text": out})
            self._json(200, {**base, "object": "chat.completion" if chat else "text_completion",
                             "choices": [{**choice, "finish_reason": "length"}], "usage": usage})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()

        def send(choice: dict[str, Any] | None, **extra: Any) -> None:
            doc = {**base, "choices": [] if choice is None else [choice], **extra}
            self.wfile.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
            self.wfile.flush()

        try:
            if chat:
                send({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None})
            for tok in engine.generate(ids, max_tokens):
                piece = f" t{tok}"
                send({"index": 0, "delta": {"content": piece}, "finish_reason": None} if chat
                     else {"index": 0, "text": piece, "logprobs": None, "finish_reason": None})
            send({"index": 0, "delta": {}, "finish_reason": "length"} if chat
                 else {"index": 0, "text": "", "logprobs": None, "finish_reason": "length"})
            if (req.get("stream_options") or {}).get("include_usage"):
                send(None, usage=usage)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away mid-stream


class Server(ThreadingHTTPServer):
    # On SIGTERM, server_close() waits for the requests in flight (each ends with its stream): a
    # daemon thread still inside torch when the interpreter finalizes is unwound through C++
    # frames and aborts the process (SIGABRT, seen once in CI).
    daemon_threads = False
    block_on_close = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that connected and left
            super().handle_error(request, client_address)

    def __init__(self, address: tuple[str, int], engine: Engine, profiler: Profiler) -> None:
        super().__init__(address, Handler)
        self.engine = engine
        self.profiler = profiler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=8000, help="TCP port (0: any free port) [8000]")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind [127.0.0.1]")
    parser.add_argument("--seed", type=int, default=0, help="weight seed [0]")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads [1]")
    parser.add_argument("--engine", choices=("torch", "jax"), default="torch",
                        help="model implementation: the torch decoder or the JAX one [torch]")
    parser.add_argument("--buckets", action="store_true",
                        help="jax: pad prompts to the buckets 16/32/64 (one prefill compile per bucket)")
    args = parser.parse_args(argv)
    if args.engine == "jax":
        engine: Engine = JaxEngine(args.seed, buckets=args.buckets)
    else:
        engine = Engine(args.seed)
        engine.torch.set_num_threads(args.threads)
    for _ in engine.generate(engine.tokenize("warm up the kernels"), 4):
        pass
    profiler = Profiler(next((os.environ[e] for e in PROFILER_DIR_ENVS if os.environ.get(e)), None), engine)
    server = Server((args.host, args.port), engine, profiler)

    def shutdown(signum: int, frame: Any) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, shutdown)
    print(f"listening on http://{args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
