"""The example tiny-decoder server's prefix cache, admission and ``GET /metrics`` (vLLM's names),
end to end: the real server as a subprocess on 127.0.0.1, prompts sent with the standard library,
``/metrics`` read with :func:`tracekit.collectors.load.prometheus.parse_metrics`. The KV pool's
bookkeeping is also tested in process (no torch needed)."""

from __future__ import annotations

import http.client
import importlib.util
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import serve_example

from tracekit.collectors.load.prometheus import metrics_url, parse_metrics

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "serve_tiny_decoder.py"
BLOCK = 16  # the server's default --block-size
NAMES = (
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
)


def cached_tokens(n_prompt: int, cached_blocks: int, block: int = BLOCK) -> int:
    """Tokens a prompt of ``n_prompt`` tokens finds cached when its first ``cached_blocks`` full
    blocks are in the store: whole blocks, and never the last prompt token (it is recomputed)."""
    return min(cached_blocks, (n_prompt - 1) // block) * block


def words(tag: str, n: int) -> str:
    """A prompt of ``n`` words (one token each on the server) unique to ``tag``."""
    return " ".join(f"{tag}{i}" for i in range(n))


# --------------------------------------------------------------------------------------------
# The server


def start_server(*args: str) -> Iterator[str]:
    pytest.importorskip("torch", reason="the example server's model is a torch module (pip install 'tracekit[torch]')")
    yield from serve_example(*args, stop_timeout=60)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    yield from start_server()


@pytest.fixture(scope="module")
def server_no_cache() -> Iterator[str]:
    yield from start_server("--no-prefix-cache")


@pytest.fixture(scope="module")
def server_one_at_a_time() -> Iterator[str]:
    yield from start_server("--max-running", "1")


def _conn(url: str) -> http.client.HTTPConnection:
    host, port = url.removeprefix("http://").split(":")
    return http.client.HTTPConnection(host, int(port), timeout=300)


def complete(url: str, prompt: str, max_tokens: int = 8) -> list[str]:
    """The streamed tokens of one ``/v1/completions`` request."""
    conn = _conn(url)
    try:
        body = json.dumps({"model": "tiny-decoder", "prompt": prompt, "max_tokens": max_tokens, "stream": True})
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200
        out: list[str] = []
        for line in resp.read().decode().splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                text = json.loads(line[6:])["choices"][0]["text"]
                if text:
                    out.append(text)
        assert len(out) == max_tokens
        return out
    finally:
        conn.close()


def again_usage(url: str, prompt: str) -> int | None:
    """``usage.prompt_tokens_details.cached_tokens`` of one more streamed request of ``prompt``."""
    conn = _conn(url)
    try:
        body = json.dumps({"model": "tiny-decoder", "prompt": prompt, "max_tokens": 2, "stream": True,
                           "stream_options": {"include_usage": True}})
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        usage = [json.loads(line[6:]).get("usage") for line in resp.read().decode().splitlines()
                 if line.startswith("data: {")]
        (last,) = [u for u in usage if u]
        return last["prompt_tokens_details"]["cached_tokens"]
    finally:
        conn.close()


def scrape(url: str) -> tuple[str, dict[str, float]]:
    """The raw ``/metrics`` text and its values by sample name (one label set each)."""
    conn = _conn(url)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Content-Type", "").startswith("text/plain")
        text = resp.read().decode()
    finally:
        conn.close()
    samples = parse_metrics(text, metrics_url(url))
    values = {s.name: s.value for s in samples}
    assert len(values) == len(samples)  # one sample per name
    return text, values


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k[len("vllm:"):]: after[k] - before[k] for k in NAMES if k.endswith("_total")}


# --------------------------------------------------------------------------------------------
# /metrics, prefix cache


def test_metrics_exposition(server: str) -> None:
    complete(server, words("expo", 20))
    text, values = scrape(server)
    assert set(values) == set(NAMES)
    samples = parse_metrics(text)
    for s in samples:
        assert s.label("model_name") == "tiny-decoder" and s.label("engine") == "0"
    assert next(s for s in samples if s.name == "vllm:request_success_total").label("finished_reason") == "length"
    for name in NAMES:
        kind = "counter" if name.endswith("_total") else "gauge"
        assert f"# TYPE {name} {kind}\n" in text and f"# HELP {name} " in text
    assert values["vllm:num_preemptions_total"] == 0.0
    assert values["vllm:num_requests_running"] == 0.0 and values["vllm:num_requests_waiting"] == 0.0
    assert 0.0 <= values["vllm:kv_cache_usage_perc"] <= 1.0
    assert values["vllm:generation_tokens_total"] >= 8 and values["vllm:request_success_total"] >= 1


def test_repeated_and_extended_prompts_hit(server: str, server_no_cache: str) -> None:
    prompt = words("rep", 100)
    longer = prompt + " " + words("ext", 40)
    _, m0 = scrape(server)
    first = complete(server, prompt)
    _, m1 = scrape(server)
    d = delta(m0, m1)
    assert d["prefix_cache_queries_total"] == 100 and d["prefix_cache_hits_total"] == 0  # a cold prompt
    assert d["prompt_tokens_total"] == 100 and d["generation_tokens_total"] == 8
    assert d["request_success_total"] == 1
    # the same prompt again: its 6 full blocks (96 tokens) are cached, the last 4 tokens prefilled
    second = complete(server, prompt)
    _, m2 = scrape(server)
    d = delta(m1, m2)
    assert cached_tokens(100, 100 // BLOCK) == 96
    assert d["prefix_cache_queries_total"] == 100 and d["prefix_cache_hits_total"] == 96
    assert d["prompt_tokens_total"] == 100  # cached prompt tokens count as prompt tokens (vLLM V1)
    assert second == first  # the cached K/V give the same tokens as a full prefill
    # a prompt extending it: its first 6 blocks hit, the next 2 are new
    extended = complete(server, longer)
    _, m3 = scrape(server)
    d = delta(m2, m3)
    assert d["prefix_cache_queries_total"] == 140 and d["prefix_cache_hits_total"] == cached_tokens(140, 6) == 96
    again = complete(server, longer)
    _, m4 = scrape(server)
    assert delta(m3, m4)["prefix_cache_hits_total"] == cached_tokens(140, 140 // BLOCK) == 128
    assert again == extended
    # nothing runs: the cached blocks are evictable and count as free, as in vLLM V1
    assert m4["vllm:kv_cache_usage_perc"] == 0.0
    assert again_usage(server, longer) == cached_tokens(140, 140 // BLOCK) == 128
    # the same outputs from a server without the cache (same seed, so the same weights)
    assert complete(server_no_cache, prompt) == first
    assert complete(server_no_cache, longer) == extended


def test_exact_block_multiple_recomputes_the_last_block(server: str) -> None:
    prompt = words("exact", 4 * BLOCK)  # 64 tokens: 4 full blocks, the last token in block 4
    _, m0 = scrape(server)
    first = complete(server, prompt, max_tokens=4)
    second = complete(server, prompt, max_tokens=4)
    _, m1 = scrape(server)
    assert delta(m0, m1)["prefix_cache_hits_total"] == cached_tokens(64, 4) == 48
    assert first == second


def test_distinct_prompts_do_not_hit(server: str) -> None:
    _, m0 = scrape(server)
    complete(server, words("distinct_a", 100))
    complete(server, words("distinct_b", 100))
    complete(server, "short prompt")  # no full block: looked up, nothing to find
    _, m1 = scrape(server)
    d = delta(m0, m1)
    assert d["prefix_cache_queries_total"] == 202 and d["prefix_cache_hits_total"] == 0


def test_no_prefix_cache_never_hits(server_no_cache: str) -> None:
    prompt = words("nocache", 100)
    out = [complete(server_no_cache, prompt) for _ in range(3)]
    _, m = scrape(server_no_cache)
    assert m["vllm:prefix_cache_hits_total"] == 0 and m["vllm:prefix_cache_queries_total"] == 0
    assert m["vllm:prompt_tokens_total"] >= 300 and m["vllm:kv_cache_usage_perc"] == 0.0
    assert out[0] == out[1] == out[2]


# --------------------------------------------------------------------------------------------
# Admission


def test_max_running_makes_requests_wait(server_one_at_a_time: str) -> None:
    url = server_one_at_a_time
    stop = threading.Event()
    failures: list[BaseException] = []

    def client(i: int) -> None:
        try:
            while not stop.is_set():  # keep 3 requests in flight until a scrape sees one waiting
                complete(url, words(f"slow{i}_", 64), max_tokens=256)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            failures.append(exc)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    seen: list[dict[str, float]] = []
    deadline = time.monotonic() + 300  # only guards against a hang
    try:
        while not failures and time.monotonic() < deadline:
            seen.append(scrape(url)[1])
            if seen[-1]["vllm:num_requests_waiting"] >= 1:
                break
            time.sleep(0.005)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=300)
    assert not failures, failures
    assert seen[-1]["vllm:num_requests_waiting"] >= 1, "no scrape saw a waiting request"
    assert all(m["vllm:num_requests_running"] <= 1 for m in seen)  # one at a time
    assert all(m["vllm:num_requests_running"] + m["vllm:num_requests_waiting"] <= 3 for m in seen)
    _, end = scrape(url)
    assert end["vllm:num_requests_running"] == 0 and end["vllm:num_requests_waiting"] == 0
    assert end["vllm:generation_tokens_total"] == 256 * end["vllm:request_success_total"]


# --------------------------------------------------------------------------------------------
# The KV pool in process (no torch: blocks are stand-in objects)


def load_example() -> Any:
    """examples/serve_tiny_decoder.py as a module (it imports torch only when an engine is built)."""
    spec = importlib.util.spec_from_file_location("serve_tiny_decoder", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kv_pool_chain_hashes_lru_and_accounting() -> None:
    pool = load_example().KVPool(n_blocks=8, block_size=4, prefix_caching=True)
    a = list(range(100, 118))  # 18 tokens: 4 full blocks
    keys = pool.block_hashes(a)
    assert len(keys) == 4 and len(set(keys)) == 4
    assert pool.block_hashes(a[:9]) == keys[:2]  # a prefix's keys are the prompt's first keys
    assert pool.block_hashes([7] + a[1:])[0] != keys[0]
    assert pool.block_hashes([0, 1, 2, 3] + a[4:])[1] != keys[1]  # chained: block 2 depends on block 1
    made: list[int] = []

    def block_kv(tag: str) -> Callable[[int], Any]:
        def make(i: int) -> Any:
            made.append(i)
            return ((f"{tag}k{i}",), (f"{tag}v{i}",))
        return make

    assert pool.lookup(keys, len(a)) == []
    pool.store(keys, block_kv("a"))
    assert made == [0, 1, 2, 3] and len(pool.cached) == 4 and pool.usage() == 0.0  # cached blocks are free
    pool.store(keys, block_kv("again"))  # already there: nothing made
    assert made == [0, 1, 2, 3]
    assert [kv[0][0] for kv in pool.lookup(keys, 18)] == ["ak0", "ak1", "ak2", "ak3"]
    assert len(pool.lookup(keys, 16)) == 3  # the last prompt token is never served from the cache
    assert len(pool.lookup(keys[:2] + [b"other"] + keys[3:], 18)) == 2  # leading run only
    assert (pool.queries, pool.hits) == (18 + 18 + 16 + 18, 0 + 16 + 12 + 8)
    # running requests take blocks from the store: the least recently used go, tails first
    pool.hold(5)
    assert len(pool.cached) == 3 and pool.usage() == 5 / 8
    assert len(pool.lookup(keys, 18)) == 3  # block 4 (the tail) went first
    pool.hold(10)  # running requests alone past the pool: the store empties, usage capped at 1
    assert len(pool.cached) == 0 and pool.usage() == 1.0
    pool.hold(-15)
    assert pool.usage() == 0.0


def test_slowdown_recomputes_each_step_and_keeps_the_output(server: str) -> None:
    """--slowdown N (a stand-in for slower hardware in docs/portfolio.md) computes every decode
    step N times: the same tokens come out."""
    prompt = words("slow", 40)
    expected = complete(server, prompt, max_tokens=6)
    for url in start_server("--slowdown", "3", "--no-prefix-cache"):
        assert complete(url, prompt, max_tokens=6) == expected
