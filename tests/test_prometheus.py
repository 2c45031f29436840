"""Scraping an inference server's Prometheus ``/metrics``: the parser on vLLM- and SGLang-style
expositions (tests/fixtures/prometheus, synthetic, names from their documentation) and the
scraper against real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import itertools
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tracekit.collectors.load.client import LoadSpec, check_spec
from tracekit.collectors.load.prometheus import (
    ScrapeLog,
    Scraper,
    ServerSample,
    metrics_url,
    parse_metrics,
    probe,
)
from tracekit.errors import LoadInputError, TracekitError

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "prometheus"
VLLM_MODEL = (("engine", "0"), ("model_name", "meta-llama/Llama-3.1-8B-Instruct"))
SGL_MODEL = (("model_name", "meta-llama/Llama-3.1-8B-Instruct"),)


def by_name(samples: list[ServerSample]) -> dict[str, list[ServerSample]]:
    out: dict[str, list[ServerSample]] = {}
    for s in samples:
        out.setdefault(s.name, []).append(s)
    return out


def test_fixtures_say_they_are_synthetic() -> None:
    for name in ("vllm_metrics.txt", "sglang_metrics.txt"):
        first = (FIXTURES / name).read_text().splitlines()[0]
        assert first.startswith("# SYNTHETIC: written from "), first
        assert "metric names as documented, values invented" in (FIXTURES / name).read_text()


def test_parse_vllm_exposition() -> None:
    samples = parse_metrics((FIXTURES / "vllm_metrics.txt").read_text())
    named = by_name(samples)
    one = {n: s[0].value for n, s in named.items() if len(s) == 1}
    # gauges and counters under their exposed names: the vllm: colon and the _total suffix kept
    assert one["vllm:num_requests_running"] == 7.0
    assert one["vllm:num_requests_waiting"] == 3.0
    assert one["vllm:kv_cache_usage_perc"] == 0.4375 == one["vllm:gpu_cache_usage_perc"]
    assert one["vllm:prefix_cache_queries_total"] == 51200.0
    assert one["vllm:prefix_cache_hits_total"] == 20480.0
    assert one["vllm:num_preemptions_total"] == 2.0
    assert one["vllm:prompt_tokens_total"] == 51200.0
    assert one["vllm:generation_tokens_total"] == 12800.0
    assert one["vllm:spec_decode_num_drafts_total"] == 4000.0
    assert one["vllm:spec_decode_num_draft_tokens_total"] == 12000.0
    assert one["vllm:spec_decode_num_accepted_tokens_total"] == 8800.0
    assert named["vllm:prefix_cache_hits_total"][0].labels == VLLM_MODEL  # sorted (name, value) pairs
    assert named["vllm:prefix_cache_hits_total"][0].label("model_name") == "meta-llama/Llama-3.1-8B-Instruct"
    assert named["vllm:prefix_cache_hits_total"][0].label("nope") is None
    assert not any(s.name in ("vllm:prefix_cache_hits", "vllm:prompt_tokens") for s in samples)
    # a labelled family: one sample per label set
    success = {s.label("finished_reason"): s.value for s in named["vllm:request_success_total"]}
    assert success == {"stop": 90.0, "length": 10.0, "abort": 0.0}
    per_pos = {s.label("position"): s.value for s in named["vllm:spec_decode_num_accepted_tokens_per_pos_total"]}
    assert per_pos == {"0": 3600.0, "1": 3000.0, "2": 2200.0}
    # the histogram: its _bucket/_sum/_count samples under their own names, le as a label
    buckets = named["vllm:time_to_first_token_seconds_bucket"]
    assert [s.label("le") for s in buckets][:4] == ["0.001", "0.005", "0.01", "0.02"]
    assert buckets[-1].label("le") == "+Inf" and buckets[-1].value == 100.0
    assert len(buckets) == 23
    assert {s.label("le"): s.value for s in buckets}["0.04"] == 31.0
    assert buckets[3].labels == (("engine", "0"), ("le", "0.02"), ("model_name", "meta-llama/Llama-3.1-8B-Instruct"))
    assert one["vllm:time_to_first_token_seconds_count"] == 100.0
    assert one["vllm:time_to_first_token_seconds_sum"] == 6.125
    assert len(samples) == 43


def test_parse_sglang_exposition() -> None:
    samples = parse_metrics((FIXTURES / "sglang_metrics.txt").read_text())
    named = by_name(samples)
    one = {n: s[0].value for n, s in named.items() if len(s) == 1}
    assert one["sglang:prompt_tokens_total"] == 1.2345e6  # exponent notation
    assert one["sglang:generation_tokens_total"] == 654321.0
    assert one["sglang:token_usage"] == 0.31
    assert one["sglang:cache_hit_rate"] == 0.42
    assert one["sglang:num_running_reqs"] == 24.0
    assert one["sglang:num_queue_reqs"] == 5.0
    assert one["sglang:num_used_tokens"] == 40960.0
    assert one["sglang:gen_throughput"] == 1234.5
    assert one["sglang:spec_accept_length"] == 2.75
    assert named["sglang:token_usage"][0].labels == SGL_MODEL
    buckets = named["sglang:time_to_first_token_seconds_bucket"]
    assert [s.label("le") for s in buckets][-3:] == ["25.0", "30.0", "+Inf"]
    assert {s.label("le"): s.value for s in buckets}["0.25"] == 150.0
    assert one["sglang:time_to_first_token_seconds_sum"] == 81.5  # _sum exposed before the buckets
    assert one["sglang:time_to_first_token_seconds_count"] == 200.0


def test_parse_nan_untyped_escapes_and_comments() -> None:
    text = (
        "# a free comment line, neither HELP nor TYPE\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{model_name="m"} NaN\n'
        "untyped_metric 3\n"
        'labelled{path="a\\"b\\\\c\\nd"} -Inf\n'
        "# TYPE vllm:num_preemptions_total counter\n"
        'vllm:num_preemptions_total{model_name="m"} 0.0\n'
        'vllm:num_preemptions_created{model_name="m"} 1.7e+09\n'
        "with_timestamp 5 1700000000000\n"
    )
    samples = parse_metrics(text)
    assert [s.name for s in samples] == ["vllm:kv_cache_usage_perc", "untyped_metric", "labelled",
                                         "vllm:num_preemptions_total", "vllm:num_preemptions_created",
                                         "with_timestamp"]
    assert math.isnan(samples[0].value)
    assert samples[1] == ServerSample("untyped_metric", (), 3.0)
    assert samples[2].labels == (("path", 'a"b\\c\nd'),) and samples[2].value == -math.inf
    assert samples[4].value == 1.7e9
    assert samples[5].value == 5.0  # the timestamp is not the value
    assert parse_metrics("") == [] and parse_metrics("# only a comment\n") == []


@pytest.mark.parametrize("text", [
    'ok 1\nvllm:x{model_name="m" 1\n',
    "ok 1\nbroken not_a_number\n",
    "ok 1\n# TYPE x nonsense\nx 1\n",
    'ok 1\nx{a=unquoted} 1\n',
])
def test_malformed_text_is_one_line_error(text: str) -> None:
    with pytest.raises(LoadInputError) as exc:
        parse_metrics(text, "http://127.0.0.1:1/metrics")
    msg = str(exc.value)
    assert isinstance(exc.value, TracekitError)
    assert msg.startswith("http://127.0.0.1:1/metrics: malformed Prometheus text at line "), msg
    assert "\n" not in msg
    assert exc.value.reason.startswith("malformed Prometheus text at line 2 ")


def test_metrics_url() -> None:
    cases = {
        "http://127.0.0.1:8000": "http://127.0.0.1:8000/metrics",
        "http://127.0.0.1:8000/": "http://127.0.0.1:8000/metrics",
        "http://h:8000/v1": "http://h:8000/metrics",
        "http://h:8000/v1/": "http://h:8000/metrics",
        "http://h:8000/v1/completions": "http://h:8000/metrics",
        "http://h:8000/v1/chat/completions": "http://h:8000/metrics",
        "https://h/v1/completions?x=1": "https://h/metrics",
        "http://h:8000/metrics": "http://h:8000/metrics",
        "http://h/proxy/v1/completions": "http://h/proxy/metrics",
        "http://[::1]:9000/v1": "http://[::1]:9000/metrics",
        "http://user@h:8000/v1": "http://h:8000/metrics",
    }
    for url, want in cases.items():
        assert metrics_url(url) == want, url
        assert metrics_url(want) == want  # idempotent
    for bad in ("localhost:8000", "ftp://h/v1", "http:///v1", "http://h:notaport/v1"):
        with pytest.raises(LoadInputError) as exc:
            metrics_url(bad)
        assert str(exc.value).startswith(f"{bad}: ") and "\n" not in str(exc.value)
        with pytest.raises(LoadInputError) as same:
            check_spec(LoadSpec(url=bad, duration_s=1.0, concurrency=1))  # the load client refuses it alike
        assert str(same.value) == str(exc.value)
    # a password is refused, and not repeated in the refusal
    for fn in (metrics_url, lambda u: check_spec(LoadSpec(url=u, duration_s=1.0, concurrency=1))):
        with pytest.raises(LoadInputError) as exc:
            fn("http://user:s3cret@h:8000/v1")
        assert "s3cret" not in str(exc.value) and "password does not belong in the URL" in str(exc.value)


# --------------------------------------------------------------------------------------------
# Scraper against real servers on 127.0.0.1


@contextmanager
def serve(respond: Callable[[int], tuple[int, str]]) -> Iterator[tuple[str, list[int]]]:
    """An HTTP server on 127.0.0.1 answering ``GET /metrics`` with ``respond(n)`` (status, body)
    for its n-th request (1-based), 404 elsewhere. Yields (base URL, hits: one entry per request)."""
    hits: list[int] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.path != "/metrics":
                status, body = 404, "no route"
            else:
                with lock:
                    hits.append(len(hits) + 1)
                    n = len(hits)
                status, body = respond(n)
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


def counter_text(n: int) -> str:
    return ("# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n"
            "# TYPE vllm:prompt_tokens_total counter\n"
            f'vllm:prompt_tokens_total{{engine="0",model_name="m"}} {10.0 * n}\n'
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0",model_name="m"}} {n % 3}\n')


def wait_until(cond: Callable[[], bool], deadline_s: float = 60.0) -> None:
    """Poll ``cond`` until true; the deadline only guards against a hang."""
    end = time.monotonic() + deadline_s
    while not cond():
        assert time.monotonic() < end, "condition not reached before the deadline"
        time.sleep(0.01)


def test_scraper_records_changing_counters() -> None:
    with serve(lambda n: (200, counter_text(n))) as (url, hits):
        scraper = Scraper(url + "/v1/completions", interval_s=0.05, timeout_s=5.0)
        assert scraper.url == url + "/metrics"
        t_start = time.time_ns()
        scraper.start()
        wait_until(lambda: scraper.n_scrapes >= 2)
        log = scraper.stop()
        t_end = time.time_ns()
        assert scraper.stop() is log  # a second stop returns the same log
        assert probe(url + "/v1") and len(hits) == len(log.scrapes) + 1
    assert isinstance(log, ScrapeLog) and log.url == url + "/metrics"
    assert log.errors == []
    n = len(log.scrapes)
    assert n >= 3 and n == log.attempts  # ≥ 2 from the thread, one last at stop
    stamps = [t for t, _ in log.scrapes]
    assert t_start <= stamps[0] and stamps[-1] <= t_end
    assert all(a < b for a, b in itertools.pairwise(stamps))
    # every scrape saw the server's value at that request: 10, 20, 30, ...
    counters = [next(s.value for s in samples if s.name == "vllm:prompt_tokens_total") for _, samples in log.scrapes]
    assert counters == [10.0 * i for i in range(1, n + 1)]
    running = [next(s.value for s in samples if s.name == "vllm:num_requests_running") for _, samples in log.scrapes]
    assert running == [float(i % 3) for i in range(1, n + 1)]
    assert log.scrapes[0][1][0].labels == (("engine", "0"), ("model_name", "m"))


def test_scraper_on_a_server_without_metrics() -> None:
    with serve(lambda n: (404, "Not Found")) as (url, hits):
        scraper = Scraper(url, interval_s=0.05).start()
        wait_until(lambda: scraper.n_attempts >= 2)
        log = scraper.stop()
        assert not probe(url)
    assert log.scrapes == []
    assert log.errors == ["HTTP 404"]  # distinct texts only
    assert log.attempts == len(hits) - 1 >= 3  # probe made the last request


def test_scraper_with_nothing_listening_and_bad_text() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = Scraper(f"http://127.0.0.1:{port}/v1", interval_s=0.05, timeout_s=2.0).start().stop()
    assert log.scrapes == [] and log.attempts >= 1
    assert log.errors == ["Connection refused"]
    assert not probe(f"http://127.0.0.1:{port}")

    with serve(lambda n: (200, counter_text(n) if n % 2 else "garbage here\n")) as (url, _):
        scraper = Scraper(url, interval_s=0.02).start()
        wait_until(lambda: scraper.n_attempts >= 4)
        log = scraper.stop()
    assert len(log.errors) == 1 and log.errors[0].startswith("malformed Prometheus text at line 1 ")
    assert len(log.scrapes) == (log.attempts + 1) // 2  # odd requests parsed, even ones noted


def test_scraper_rejects_bad_settings() -> None:
    for kwargs, msg in (({"interval_s": 0}, "scrape interval must be > 0 s"),
                        ({"timeout_s": -1}, "scrape timeout must be > 0 s"),
                        ({"interval_s": math.nan}, "scrape interval must be > 0 s")):
        with pytest.raises(LoadInputError, match=msg):
            Scraper("http://127.0.0.1:1", **kwargs)
    with pytest.raises(LoadInputError, match="expected an http:// or https:// URL"):
        Scraper("127.0.0.1:8000")
