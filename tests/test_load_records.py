"""A load's records without a server: the summary (the serving analyzer's SQL) against percentiles
computed here with numpy, the request log written and read back, and the layering (ingest reads
a request log without importing the HTTP client)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLES

from tracekit.collectors import load
from tracekit.collectors.load import LoadResult, LoadSpec, RequestRecord, summarize
from tracekit.errors import TraceInputError
from tracekit.request_rows import read_requests, write_requests

MS = 1_000_000  # ns
T0 = 1_700_000_000_000_000_000  # a Unix time, ns


def _hand_records() -> list[RequestRecord]:
    """Six requests whose definitions matter: two failures (one with a first token and gaps that
    must not count), a one-token request (no TPOT), a complete stream without text."""
    return [
        RequestRecord(0, T0, 10 * MS, [2 * MS, 4 * MS], 20 * MS, 7, 3, 200, None, "usage"),
        RequestRecord(1, T0 + 5 * MS, 30 * MS, [1 * MS], 35 * MS, 9, 2, 200, None, "usage"),
        RequestRecord(2, T0 + 8 * MS, 5 * MS, [], 6 * MS, 4, 1, 200, None, "counted"),
        RequestRecord(3, T0 + 9 * MS, 1 * MS, [100 * MS], 150 * MS, 4, 2, 200, "stream ended before data: [DONE]",
                      "counted"),
        RequestRecord(4, T0 + 12 * MS, 50 * MS, [3 * MS, 3 * MS, 3 * MS], 70 * MS, 11, 4, 200, None, "usage"),
        RequestRecord(5, T0 + 20 * MS, None, [], 2 * MS, None, 0, 500, "HTTP 500: overloaded", "counted"),
        RequestRecord(6, T0 + 21 * MS, None, [], 4 * MS, 3, 0, 200, None, "counted"),
    ]


def _random_records(n: int, seed: int) -> list[RequestRecord]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        failed = rng.random() < 0.2
        k = rng.randint(1, 9)
        ttft = rng.randint(MS, 900 * MS)
        itl = [rng.randint(MS // 10, 90 * MS) for _ in range(k - 1)]
        out.append(RequestRecord(i, T0 + rng.randint(0, 10**10), ttft, itl, ttft + sum(itl) + rng.randint(0, MS),
                                 rng.randint(1, 500), k, 500 if failed else 200, "HTTP 500" if failed else None,
                                 "usage"))
    return out


def _numpy_summary(recs: list[RequestRecord]) -> dict[str, float | None]:
    """The summary's definitions (docs/capture.md) computed here: numpy's linear percentiles over
    the requests without error, ITL gaps pooled, TPOT of requests with ≥ 2 output tokens."""
    ok = [r for r in recs if r.error is None]
    samples = {
        "ttft": [r.ttft_ns for r in ok if r.ttft_ns is not None],
        "tpot": [(r.e2e_ns - r.ttft_ns) / (r.output_tokens - 1) for r in ok
                 if r.ttft_ns is not None and r.output_tokens >= 2],
        "itl": [g for r in ok for g in r.itl_ns],
        "e2e": [r.e2e_ns for r in ok],
    }
    window_s = (max(r.start_ns + r.e2e_ns for r in recs) - min(r.start_ns for r in recs)) / 1e9
    out: dict[str, float | None] = {
        "requests": len(recs), "errors": len(recs) - len(ok), "output_tokens": sum(r.output_tokens for r in ok),
        "window_s": window_s, "output_tokens_per_s": sum(r.output_tokens for r in ok) / window_s,
        "requests_per_s": len(ok) / window_s, "error_rate": (len(recs) - len(ok)) / len(recs),
    }
    for name, xs in samples.items():
        for q in (50, 95, 99):
            out[f"{name}_p{q}_ms"] = float(np.percentile(np.array(xs, dtype=float), q)) / 1e6 if xs else None
    return out


@pytest.mark.parametrize("recs", [_hand_records(), _random_records(57, seed=1), _random_records(3, seed=2)],
                         ids=["hand", "random-57", "random-3"])
def test_summary_follows_the_definitions(recs: list[RequestRecord]) -> None:
    got = summarize(recs).as_dict()
    want = _numpy_summary(recs)
    assert set(got) == set(want)
    for key, value in want.items():
        if value is None:
            assert got[key] is None, key
        else:  # float rounding of the interpolation differs between numpy and DuckDB in the last bits
            assert got[key] == pytest.approx(value, rel=1e-12, abs=0), key


def test_summary_of_the_hand_records_in_numbers() -> None:
    s = summarize(_hand_records())
    # the failures' first token (1 ms) and gap (100 ms) are left out: TTFT 5, 10, 30, 50 ms
    assert s.ttft_ms.p50 == 20.0 and s.ttft_ms.p99 == pytest.approx(30 + 20 * 0.97)
    assert s.itl_ms.p50 == 3.0 and s.itl_ms.p99 == pytest.approx(3.95)  # gaps 1, 2, 3, 3, 3, 4 ms
    assert s.tpot_ms.p50 == 5.0  # (20−10)/2, (35−30)/1, (70−50)/3; none for 1 or 0 output tokens
    assert s.e2e_ms.p50 == 20.0  # 4, 6, 20, 35, 70 ms: the text-less complete stream counts
    assert (s.requests, s.errors, s.output_tokens) == (7, 2, 10)
    assert s.window_s == 159e-3 and s.error_rate == 2 / 7  # T0 → request 3's end at 9 + 150 ms
    assert s.output_tokens_per_s == 10 / 159e-3 and s.requests_per_s == 5 / 159e-3


def test_summary_without_requests_and_with_only_failures() -> None:
    empty = LoadResult(LoadSpec("http://127.0.0.1:1", 1.0, concurrency=1), 0, 0, []).summary()
    assert empty.as_dict() == {"requests": 0, "errors": 0, "output_tokens": 0, "window_s": 0.0,
                               **{f"{n}_p{q}_ms": None for n in ("ttft", "tpot", "itl", "e2e") for q in (50, 95, 99)},
                               "output_tokens_per_s": None, "requests_per_s": None, "error_rate": None}
    failed = [r for r in _hand_records() if r.error is not None]
    s = summarize(failed).as_dict()
    assert all(s[f"{n}_p{q}_ms"] is None for n in ("ttft", "tpot", "itl", "e2e") for q in (50, 95, 99))
    assert (s["requests"], s["errors"], s["error_rate"], s["output_tokens_per_s"]) == (2, 2, 1.0, 0.0)


def test_request_log_round_trip_and_refusals(tmp_path: Path) -> None:
    recs = _hand_records()
    log = tmp_path / "tracekit-requests.jsonl"
    write_requests(recs, log)
    assert read_requests(log) == recs
    assert [json.loads(line)["request_id"] for line in log.read_text().splitlines()] == list(range(len(recs)))
    lines = log.read_text().splitlines()
    for bad, reason in (('{"request_id": 1', "line 2: not JSON"),
                        ("[1, 2]", "line 2: expected a JSON object per request"),
                        (lines[0].replace('"itl_ns": [2000000, 4000000]', '"itl_ns": [true]'),
                         "line 2: itl_ns must be a list of integers (ns)"),
                        (lines[0].replace('"usage"', '"guessed"'),
                         "line 2: token_count_source must be 'usage' or 'counted'"),
                        (lines[0].replace('"e2e_ns": 20000000', '"e2e_ns": 2.5'),
                         "line 2: e2e_ns missing or of the wrong type")):
        log.write_text("\n".join([lines[0], bad, *lines[1:]]) + "\n")
        with pytest.raises(TraceInputError) as exc:
            read_requests(log)
        assert str(exc.value) == f"{log}: {reason}" or str(exc.value).startswith(f"{log}: {reason} ("), bad


def test_ingest_reads_a_request_log_without_the_http_client(tmp_path: Path) -> None:
    """The store layer reads and inserts a capture directory's request log; the load driver (its
    HTTP client) is not imported."""
    cap = tmp_path / "cap"
    cap.mkdir()
    trace = SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"
    (cap / trace.name).write_bytes(trace.read_bytes())
    write_requests(_hand_records(), cap / "tracekit-requests.jsonl")
    code = (
        "import sys, tracekit\n"
        f"[r] = tracekit.ingest([{str(cap)!r}], store={str(tmp_path / 's.duckdb')!r})\n"
        "from tracekit.store import open_store\n"
        "with open_store(" + repr(str(tmp_path / "s.duckdb")) + ", read_only=True) as con:\n"
        "    print(con.execute('SELECT count(*) FROM requests WHERE run_id = ?', [r.run_id]).fetchall()[0][0])\n"
        "print(sorted(m for m in sys.modules if m == 'http.client' or m.startswith('tracekit.collectors')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    n, modules = done.stdout.splitlines()
    assert int(n) == len(_hand_records())
    assert modules == "[]"


def test_the_load_driver_names_stay_importable() -> None:
    """``from tracekit.collectors.load import X`` for every name callers use (cli, capture, tests,
    tools, benchmarks, docs)."""
    for name in ("VOCAB", "LoadProgress", "LoadResult", "LoadSpec", "LoadSummary", "Percentiles", "RequestRecord",
                 "check_spec", "insert_requests", "parse_length_dist", "read_prompts", "read_requests", "run_load",
                 "store_requests", "wait_for_endpoint", "write_requests"):
        assert getattr(load, name) is not None, name
