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
* ``GET /v1/models`` (one model, ``tiny-decoder``), ``GET /health``, ``GET /metrics`` (below).
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

Prefix cache (torch engine; ``--no-prefix-cache`` turns it off, the JAX engine has none), as
vLLM's automatic prefix caching does it: the prompt's full blocks of ``--block-size`` tokens
(default 16) are keyed by a chained hash (SHA-256 of the parent block's key and the block's token
ids, so a key names the whole prefix up to its block). After a request's prefill, the K/V
tensors of its full prompt blocks are copied into an LRU store. A new request looks up its
longest run of cached leading blocks (at most ``(prompt tokens − 1) // block size`` blocks: the
last prompt token is always computed, so the first output token has logits, as in vLLM), copies
their K/V slices into its own KV cache and prefills only the remaining tokens at their positions.
Output tokens are the same with and without a hit. The usage chunk reports the hit as vLLM does,
``usage.prompt_tokens_details.cached_tokens``.

``--slowdown N`` computes every decode step N times (the same token at the same position, so the
same K/V and the same output): a stand-in for a slower device, so that two configurations of this
server can play two kinds of hardware in a portfolio (docs/portfolio.md).

KV memory is accounted in blocks, ``--kv-blocks`` in all (default 512): a running request holds
``⌈tokens in its KV cache / block size⌉`` blocks (its prompt, then one more token per decode
step; each request has its own copy, so a cached block copied into a running request counts
twice, unlike vLLM's shared blocks), and the prefix store holds at most what the running requests
leave: least-recently-used blocks are evicted (a chain's tail before its head) when a store or a
running request's growth would pass ``--kv-blocks``. Nothing is preempted: running requests may
alone exceed the pool. ``--max-running N`` admits at most N requests at once (0: no limit); the
others wait on a semaphore (woken in no set order) and count as waiting.

``GET /metrics`` serves the Prometheus text format with vLLM V1's names and labels
``model_name="tiny-decoder",engine="0"``:

* ``vllm:num_requests_running`` (gauge): requests admitted and not ended.
* ``vllm:num_requests_waiting`` (gauge): requests waiting for admission (``--max-running``).
* ``vllm:kv_cache_usage_perc`` (gauge, 0..1): blocks held by running requests / ``--kv-blocks``,
  capped at 1. Blocks only in the prefix store are free to evict and count as free, as vLLM V1
  counts its cached blocks that no running request holds.
* ``vllm:prefix_cache_queries_total`` (counter, tokens): prompt tokens of the requests looked up
  in the prefix cache (every prompt token of every request, when the cache is on; 0 when off).
* ``vllm:prefix_cache_hits_total`` (counter, tokens): prompt tokens found cached (whole blocks).
* ``vllm:num_preemptions_total`` (counter): always 0, this server never preempts.
* ``vllm:prompt_tokens_total`` (counter, tokens): prompt tokens of the requests whose prefill
  ended, cached ones included (as vLLM V1 counts them).
* ``vllm:generation_tokens_total`` (counter, tokens): output tokens produced.
* ``vllm:request_success_total`` (counter, label ``finished_reason="length"``): requests that
  produced all their tokens (a client that leaves mid-stream does not count).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import sys
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Generator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

MODEL_NAME = "tiny-decoder"
CONTEXT = 1024  # tokens (torch engine)
BLOCK_SIZE = 16  # tokens per KV block (prefix cache and KV accounting)
KV_BLOCKS = 512  # KV blocks in all

#: One cached block: per layer, the K and the V slices of shape [1, heads, BLOCK_SIZE, head_dim].
BlockKV = tuple[tuple[Any, ...], tuple[Any, ...]]


class KVPool:
    """The server's KV memory in blocks of ``block_size`` tokens (``n_blocks`` in all) and its
    prefix cache (an LRU store of blocks' K/V keyed by chained block hashes); thread-safe.

    ``held``: blocks held by running requests (see :meth:`hold`); ``cached``: the prefix store,
    least recently used first; ``queries`` / ``hits``: prompt tokens looked up / found cached."""

    def __init__(self, n_blocks: int, block_size: int, prefix_caching: bool) -> None:
        self.n_blocks = n_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.lock = threading.Lock()
        self.cached: OrderedDict[bytes, BlockKV] = OrderedDict()
        self.held = 0
        self.queries = 0
        self.hits = 0

    def block_hashes(self, ids: list[int]) -> list[bytes]:
        """The keys of the full blocks of ``ids``: block i's key hashes block i−1's key and its tokens."""
        out: list[bytes] = []
        parent = b""
        bs = self.block_size
        for i in range(len(ids) // bs):
            parent = hashlib.sha256(parent + ",".join(map(str, ids[i * bs : (i + 1) * bs])).encode()).digest()
            out.append(parent)
        return out

    def _touch(self, keys: list[bytes]) -> None:
        for key in reversed(keys):  # the chain's head most recent: its tail is evicted first
            self.cached.move_to_end(key)

    def _evict(self) -> None:
        while self.cached and len(self.cached) + self.held > self.n_blocks:
            self.cached.popitem(last=False)

    def lookup(self, keys: list[bytes], n_tokens: int) -> list[BlockKV]:
        """The longest run of cached leading blocks of a prompt of ``n_tokens`` tokens (at most
        ``(n_tokens − 1) // block_size`` blocks); counts the query (``n_tokens``) and the hit."""
        with self.lock:
            run: list[BlockKV] = []
            for key in keys[: (n_tokens - 1) // self.block_size]:
                entry = self.cached.get(key)
                if entry is None:
                    break
                run.append(entry)
            self._touch(keys[: len(run)])
            self.queries += n_tokens
            self.hits += len(run) * self.block_size
            return run

    def store(self, keys: list[bytes], block_kv: Callable[[int], BlockKV]) -> None:
        """Put the blocks ``keys`` in the store (``block_kv(i)`` makes block i's K/V; blocks
        already there are only touched), then evict down to the pool's size."""
        with self.lock:
            for i, key in enumerate(keys):
                if key not in self.cached:
                    self.cached[key] = block_kv(i)
            self._touch(keys)
            self._evict()

    def hold(self, n: int) -> None:
        """A running request holds ``n`` more blocks (negative: releases them)."""
        with self.lock:
            self.held += n
            self._evict()

    def usage(self) -> float:
        """Blocks held by running requests / pool size, capped at 1 (cached blocks are evictable)."""
        with self.lock:
            return min(1.0, self.held / self.n_blocks)


class Engine:
    """The torch model and a greedy generator streaming one token per decode step."""

    name = "torch"

    #: Each decode step is computed this many times (``--slowdown``): a stand-in for a slower device.
    slowdown = 1

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

    def generate(self, prompt_ids: list[int], max_tokens: int, pool: KVPool | None = None,
                 info: dict[str, int] | None = None) -> Generator[int, None, None]:
        """Prefill, then yield ``max_tokens`` greedy tokens (the first from the prefill's logits).

        With a ``pool`` that caches prefixes, the prompt's longest cached run of leading blocks
        is copied into the request's KV cache and only the rest is prefilled (at its positions);
        the prompt's full blocks are stored after the prefill. ``info["cached_tokens"]`` is set to
        the prompt tokens served from the cache."""
        torch = self.torch
        with torch.inference_mode():
            cache = self.kv_cache(self.cfg, 1)
            keys = pool.block_hashes(prompt_ids) if pool is not None and pool.prefix_caching else []
            start = 0
            if pool is not None and pool.prefix_caching:
                bs = pool.block_size
                for i, (ks, vs) in enumerate(pool.lookup(keys, len(prompt_ids))):
                    for layer in range(self.cfg.n_layers):
                        cache.k[layer][:, :, i * bs : (i + 1) * bs] = ks[layer]
                        cache.v[layer][:, :, i * bs : (i + 1) * bs] = vs[layer]
                    start = (i + 1) * bs
                cache.length = start  # the model prefills the rest from this position
            if info is not None:
                info["cached_tokens"] = start
            tok = self.model(torch.tensor([prompt_ids[start:]]), cache).argmax(-1, keepdim=True)
            if keys:
                assert pool is not None
                bs = pool.block_size

                def block_kv(i: int) -> BlockKV:
                    return (tuple(k[:, :, i * bs : (i + 1) * bs].clone() for k in cache.k),
                            tuple(v[:, :, i * bs : (i + 1) * bs].clone() for v in cache.v))

                pool.store(keys, block_kv)
            yield int(tok)
            for _ in range(max_tokens - 1):
                for _ in range(self.slowdown - 1):  # the same step again: same K/V, same position
                    length = cache.length
                    self.model(tok, cache)
                    cache.length = length
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

    def generate(self, prompt_ids: list[int], max_tokens: int, pool: KVPool | None = None,
                 info: dict[str, int] | None = None) -> Generator[int, None, None]:
        """Prefill, then yield ``max_tokens`` greedy tokens; no prefix caching (``pool`` and ``info``
        unused)."""
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


class Metrics:
    """Admission (``max_running`` slots, 0: no limit) and the counters behind ``GET /metrics``
    (thread-safe); see the module docstring for what each metric counts."""

    LABELS = f'model_name="{MODEL_NAME}",engine="0"'

    def __init__(self, pool: KVPool, max_running: int) -> None:
        self.pool = pool
        self.slots = threading.Semaphore(max_running) if max_running > 0 else None
        self.lock = threading.Lock()
        self.running = 0
        self.waiting = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.success = 0

    def tokens(self, engine: Engine, ids: list[int], max_tokens: int,
               info: dict[str, int] | None = None) -> Generator[int, None, None]:
        """``engine.generate`` once admitted, with the KV blocks held and the tokens counted;
        ``info["cached_tokens"]``: the prompt tokens served from the prefix cache."""
        with self.lock:
            self.waiting += 1
        if self.slots is not None:
            self.slots.acquire()
        with self.lock:
            self.waiting -= 1
            self.running += 1
        held = 0
        gen = engine.generate(ids, max_tokens, self.pool, info)
        try:
            for k, tok in enumerate(gen, 1):
                need = -(-(len(ids) + k - 1) // self.pool.block_size)  # tokens in its KV cache now
                self.pool.hold(need - held)
                held = need
                with self.lock:
                    self.prompt_tokens += len(ids) if k == 1 else 0
                    self.generation_tokens += 1
                yield tok
            with self.lock:
                self.success += 1
        finally:
            gen.close()
            self.pool.hold(-held)
            with self.lock:
                self.running -= 1
            if self.slots is not None:
                self.slots.release()

    def render(self) -> str:
        """The Prometheus text exposition (format 0.0.4) of the server's metrics."""
        with self.lock:
            running, waiting = self.running, self.waiting
            prompt, generation, success = self.prompt_tokens, self.generation_tokens, self.success
        with self.pool.lock:
            queries, hits = self.pool.queries, self.pool.hits
        rows: list[tuple[str, str, str, float, str]] = [
            ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", running, ""),
            ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", waiting, ""),
            ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
             self.pool.usage(), ""),
            ("vllm:prefix_cache_queries_total", "counter",
             "Prefix cache queries, in terms of number of queried tokens.", queries, ""),
            ("vllm:prefix_cache_hits_total", "counter",
             "Prefix cache hits, in terms of number of cached tokens.", hits, ""),
            ("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.", 0, ""),
            ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", prompt, ""),
            ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", generation, ""),
            ("vllm:request_success_total", "counter", "Count of successfully processed requests.", success,
             ',finished_reason="length"'),
        ]
        out: list[str] = []
        for name, kind, doc, value, extra in rows:
            out += [f"# HELP {name} {doc}", f"# TYPE {name} {kind}",
                    f"{name}{{{self.LABELS}{extra}}} {float(value)!r}"]
        return "\n".join(out) + "\n"


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
        elif self.path == "/metrics":
            body = self.server.metrics.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
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
        info: dict[str, int] = {}

        def tokens() -> contextlib.closing[Generator[int, None, None]]:
            return contextlib.closing(self.server.metrics.tokens(engine, ids, max_tokens, info))

        def with_cached() -> dict[str, Any]:  # vLLM's usage.prompt_tokens_details, when the cache was asked
            if "cached_tokens" not in info:
                return usage
            return {**usage, "prompt_tokens_details": {"cached_tokens": info["cached_tokens"]}}

        if not req.get("stream"):
            with tokens() as gen:
                out = "".join(f" t{t}" for t in gen)
            choice = ({"index": 0, "message": {"role": "assistant", "content": out}} if chat
                      else {"index": 0, "text": out})
            self._json(200, {**base, "object": "chat.completion" if chat else "text_completion",
                             "choices": [{**choice, "finish_reason": "length"}], "usage": with_cached()})
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
            with tokens() as gen:
                for tok in gen:
                    piece = f" t{tok}"
                    send({"index": 0, "delta": {"content": piece}, "finish_reason": None} if chat
                         else {"index": 0, "text": piece, "logprobs": None, "finish_reason": None})
            send({"index": 0, "delta": {}, "finish_reason": "length"} if chat
                 else {"index": 0, "text": "", "logprobs": None, "finish_reason": "length"})
            if (req.get("stream_options") or {}).get("include_usage"):
                send(None, usage=with_cached())
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

    def __init__(self, address: tuple[str, int], engine: Engine, profiler: Profiler, metrics: Metrics) -> None:
        super().__init__(address, Handler)
        self.engine = engine
        self.profiler = profiler
        self.metrics = metrics


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
    parser.add_argument("--block-size", type=int, default=BLOCK_SIZE,
                        help=f"tokens per KV block (prefix cache, KV accounting) [{BLOCK_SIZE}]")
    parser.add_argument("--kv-blocks", type=int, default=KV_BLOCKS,
                        help=f"KV blocks in all: running requests' plus the prefix cache's [{KV_BLOCKS}]")
    parser.add_argument("--no-prefix-cache", action="store_true", help="turn the prefix cache off")
    parser.add_argument("--max-running", type=int, default=0,
                        help="requests run at once, the others wait (0: no limit) [0]")
    parser.add_argument("--slowdown", type=int, default=1,
                        help="torch: compute every decode step N times, a stand-in for a slower device [1]")
    args = parser.parse_args(argv)
    for flag, value, least in (("--block-size", args.block_size, 1), ("--kv-blocks", args.kv_blocks, 1),
                               ("--max-running", args.max_running, 0), ("--slowdown", args.slowdown, 1)):
        if value < least:
            parser.error(f"{flag} must be ≥ {least}, got {value}")
    if args.engine == "jax":
        engine: Engine = JaxEngine(args.seed, buckets=args.buckets)
    else:
        engine = Engine(args.seed)
        engine.torch.set_num_threads(args.threads)
        engine.slowdown = args.slowdown
    for _ in engine.generate(engine.tokenize("warm up the kernels"), 4):
        pass
    profiler = Profiler(next((os.environ[e] for e in PROFILER_DIR_ENVS if os.environ.get(e)), None), engine)
    pool = KVPool(args.kv_blocks, args.block_size, prefix_caching=engine.name == "torch" and not args.no_prefix_cache)
    server = Server((args.host, args.port), engine, profiler, Metrics(pool, args.max_running))

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
