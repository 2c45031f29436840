"""The load driver against real HTTP servers on 127.0.0.1: a controlled streaming server in this
process (known delays, failures, in-flight counting) and the example tiny-decoder server."""

from __future__ import annotations

import itertools
import json
import random
import re
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import serve_example
from load_server import Behaviour, State, serve

from tracekit.collectors.load import (
    VOCAB,
    LoadProgress,
    LoadResult,
    LoadSpec,
    RequestRecord,
    parse_length_dist,
    read_prompts,
    run_load,
    wait_for_endpoint,
)
from tracekit.collectors.load.records import past_capacity
from tracekit.errors import LoadInputError, TracekitError

ROOT = Path(__file__).resolve().parents[1]
MS = 1_000_000  # ns


def until_served(st: State, n: int) -> threading.Event:
    """A ``finish`` event set once the server has received ``n`` requests, so a test that needs
    that many runs until it has them however slow the machine is (``duration_s`` is only a cap)."""
    ev = threading.Event()

    def watch() -> None:
        while not ev.is_set():
            if st.n_requests >= n:
                ev.set()
            time.sleep(0.002)

    threading.Thread(target=watch, daemon=True).start()
    return ev


def test_ttft_and_itl_match_the_server_delays() -> None:
    # first token after 50 ms, then one every 10 ms; 8 tokens → e2e ≈ 50 + 7·10 ms
    with serve(Behaviour(first_token_s=0.050, token_interval_s=0.010)) as (url, st):
        res = run_load(LoadSpec(url, duration_s=60, concurrency=2, max_tokens=8, prompt_tokens="fixed:12"),
                       finish=until_served(st, 6))
    recs = res.records
    assert len(recs) == st.n_requests >= 6
    assert [r.request_id for r in recs] == list(range(len(recs)))
    for r in recs:
        assert r.error is None and r.status == 200
        assert r.token_count_source == "usage"
        assert r.output_tokens == 8 and len(r.itl_ns) == 7
        assert r.prompt_tokens == 13  # the server's usage (words + 1), not the client's 12
        assert r.ttft_ns is not None and r.ttft_ns >= 50 * MS  # the server sleeps 50 ms first
        assert r.e2e_ns >= 120 * MS  # the server takes 50 + 7·10 ms
        assert res.started_ns <= r.start_ns <= res.ended_ns
    ttft = statistics.median(r.ttft_ns for r in recs if r.ttft_ns is not None)
    itl = statistics.median(g for r in recs for g in r.itl_ns)
    assert 50 * MS <= ttft <= 130 * MS  # generous upper bound: 2 shared, busy cores
    assert 6 * MS <= itl <= 25 * MS  # generous: bursts when the client thread runs late
    s = res.summary()
    assert s.requests == len(recs) and s.errors == 0 and s.output_tokens == 8 * len(recs)
    assert s.tpot_ms.p50 is not None and 9.5 <= s.tpot_ms.p50 <= 25.0  # (e2e − ttft) / 7
    for r in recs:  # the gaps add up to the time from first token to the last one
        assert r.ttft_ns is not None and r.tpot_ns == (r.e2e_ns - r.ttft_ns) / 7
        assert 0 <= r.e2e_ns - r.ttft_ns - sum(r.itl_ns) < 60 * MS  # last token → [DONE]
    assert s.ttft_ms.p50 == pytest.approx(ttft / 1e6)
    window_s = (max(r.start_ns + r.e2e_ns for r in recs) - min(r.start_ns for r in recs)) / 1e9
    assert s.output_tokens_per_s == pytest.approx(8 * len(recs) / window_s)
    assert s.requests_per_s == pytest.approx(len(recs) / window_s)


def test_tokens_counted_without_usage_chunk_completions_and_chat() -> None:
    with serve(Behaviour(usage=False)) as (url, st):
        comp = run_load(LoadSpec(url, duration_s=0.3, concurrency=1, max_tokens=5, prompt_tokens="fixed:7"))
        chat = run_load(LoadSpec(url + "/v1", duration_s=0.3, concurrency=1, max_tokens=4,
                                 prompt_tokens="fixed:9", endpoint="chat", model="m1"))
    for res, n_out, n_in in ((comp, 5, 7), (chat, 4, 9)):
        assert res.records
        for r in res.records:
            assert r.error is None
            assert r.token_count_source == "counted"
            assert r.output_tokens == n_out  # chunks with text; the chat role chunk does not count
            assert r.prompt_tokens == n_in  # the prompt's words
            assert len(r.itl_ns) == n_out - 1
    bodies = st.bodies
    assert all(b["stream"] is True and b["stream_options"] == {"include_usage": True} for b in bodies)
    chat_bodies = [b for b in bodies if "messages" in b]
    assert chat_bodies and all(b["model"] == "m1" and b["messages"][0]["role"] == "user" for b in chat_bodies)
    assert all("model" not in b for b in bodies if "prompt" in b)  # no /v1/models on this server


def test_http_500_is_recorded_per_request() -> None:
    with serve(Behaviour(fail_every=3)) as (url, st):
        res = run_load(LoadSpec(url, duration_s=60, concurrency=2, max_tokens=3), finish=until_served(st, 6))
    failed = [r for r in res.records if r.error is not None]
    ok = [r for r in res.records if r.error is None]
    assert {r.request_id % 3 for r in failed} <= {0, 1, 2} and failed and ok
    assert len(failed) == len(res.records) // 3 or len(failed) == len(res.records) // 3 + 1
    for r in failed:
        assert r.status == 500 and r.error is not None and r.error.startswith("HTTP 500: ") and "overloaded" in r.error
        assert r.ttft_ns is None and r.output_tokens == 0
    s = res.summary()
    assert s.errors == len(failed) and s.error_rate == pytest.approx(len(failed) / len(res.records))
    assert s.output_tokens == 3 * len(ok)


def test_connection_closed_mid_stream_is_an_error() -> None:
    with serve(Behaviour(close_after=2, usage=False)) as (url, _):
        res = run_load(LoadSpec(url, duration_s=0.3, concurrency=1, max_tokens=6))
    assert res.records
    for r in res.records:
        assert r.status == 200 and r.error is not None
        assert r.ttft_ns is not None and r.output_tokens == 2 and len(r.itl_ns) == 1
        assert r.token_count_source == "counted"
    assert res.summary().errors == len(res.records) and res.summary().ttft_ms.p50 is None


def test_request_timeout() -> None:
    # the server stalls 30 s: a load that returns within 10 s gave up on the request itself
    with serve(Behaviour(stall_s=30.0)) as (url, _):
        t0 = time.monotonic()
        res = run_load(LoadSpec(url, duration_s=0.1, concurrency=1, max_tokens=2, timeout_s=0.3))
        assert time.monotonic() - t0 < 10
    [r] = res.records
    assert r.error is not None and r.error.startswith("timed out after 0.3 s")
    assert r.status is None and 0.3e9 <= r.e2e_ns < 10e9


def test_concurrency_is_bounded() -> None:
    with serve(Behaviour(first_token_s=0.02, token_interval_s=0.005)) as (url, st):
        res = run_load(LoadSpec(url, duration_s=60, concurrency=3, max_tokens=4), finish=until_served(st, 12))
    assert st.max_in_flight == 3
    assert len(res.records) == st.n_requests
    # closed loop: each worker's next request starts after its previous one ended, so at no
    # instant do more than 3 requests overlap
    events = sorted([(r.start_ns, 1) for r in res.records] + [(r.start_ns + r.e2e_ns, -1) for r in res.records])
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    assert peak == 3


def test_rate_mode_poisson_arrivals() -> None:
    rate, duration, seed = 40.0, 2.0, 7
    # the driver draws arrival gaps from random.Random(seed + 1): replay the schedule
    rng, t, schedule = random.Random(seed + 1), 0.0, []
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            break
        schedule.append(t)
    with serve(Behaviour(token_interval_s=0.001)) as (url, st):
        res = run_load(LoadSpec(url, duration_s=duration, rate_rps=rate, max_tokens=2, seed=seed))
    n = len(res.records)
    assert n == len(schedule)  # every arrival scheduled inside the duration is sent
    assert abs(n - rate * duration) <= 4 * (rate * duration) ** 0.5  # Poisson: within 4 σ
    starts = sorted((r.start_ns - res.started_ns) / 1e9 for r in res.records)
    lag = [s - p for s, p in zip(starts, schedule, strict=True)]
    # each request leaves at its scheduled arrival (s), give or take the scheduling of a busy machine
    assert min(lag) > -0.005 and statistics.median(lag) < 0.02
    assert sum(x < 0.05 for x in lag) >= 0.9 * n
    planned = [b - a for a, b in itertools.pairwise(schedule)]
    assert statistics.mean(planned) == pytest.approx(1 / rate, rel=0.2)  # exponential gaps: mean 1/rate
    assert st.max_in_flight >= 1


def test_rate_mode_with_a_concurrency_cap() -> None:
    with serve(Behaviour(first_token_s=0.05)) as (url, st):
        res = run_load(LoadSpec(url, duration_s=0.6, rate_rps=100, concurrency=2, max_tokens=1))
    assert st.max_in_flight == 2 and res.records


def test_stop_event_returns_early_and_cancels_in_flight() -> None:
    stop = threading.Event()
    seen: list[LoadProgress] = []
    with serve(Behaviour(first_token_s=0.01, token_interval_s=0.1)) as (url, _):
        t0 = time.monotonic()  # before the timer starts: it fires 0.6 s after this or later
        threading.Timer(0.6, stop.set).start()
        res = run_load(LoadSpec(url, duration_s=30, concurrency=2, max_tokens=50), stop=stop,
                       on_progress=seen.append)
        took = time.monotonic() - t0
    assert 0.6 <= took < 10  # returned once stopped, long before the 30 s duration
    assert res.cancelled == 2 and res.records == []  # each request needs ~5 s: both cut off
    assert seen and seen[-1].requests_done == 0 and seen[-1].in_flight == 0
    assert seen[-1].requests_sent == 2


def test_finish_event_lets_in_flight_requests_complete() -> None:
    """``finish`` (how tracekit capture closes its window): no new requests after it is set, and
    the ones in flight complete and are recorded, none cancelled."""
    finish = threading.Event()
    with serve(Behaviour(first_token_s=0.01, token_interval_s=0.1)) as (url, _):
        t0 = time.monotonic()  # before the timer starts: it fires 0.6 s after this or later
        timer = threading.Timer(0.6, finish.set)
        timer.start()
        set_at_ns = time.time_ns() + int(0.6e9)
        res = run_load(LoadSpec(url, duration_s=30, concurrency=2, max_tokens=10), finish=finish)
        took = time.monotonic() - t0
    assert res.cancelled == 0 and len(res.records) == 2  # each request takes ~1 s: both in flight
    assert all(r.error is None and r.output_tokens == 10 for r in res.records)
    assert all(r.start_ns < set_at_ns for r in res.records)
    assert 0.9 <= took < 15  # returned when the in-flight requests ended, not after 30 s


def test_progress_reports_what_ended() -> None:
    seen: list[LoadProgress] = []
    with serve(Behaviour(first_token_s=0.01)) as (url, _):
        res = run_load(LoadSpec(url, duration_s=1.2, concurrency=2, max_tokens=3), on_progress=seen.append)
    assert len(seen) >= 3
    assert [p.elapsed_s for p in seen] == sorted(p.elapsed_s for p in seen)
    last = seen[-1]
    assert last.requests_done == len(res.records) == last.requests_sent
    assert last.output_tokens == 3 * len(res.records) and last.errors == 0


def test_prompts_file_text_and_jsonl(tmp_path: Path) -> None:
    text = tmp_path / "prompts.txt"
    text.write_text("alpha beta\n\ngamma delta epsilon\n")
    jsonl = tmp_path / "prompts.jsonl"
    jsonl.write_text(
        json.dumps({"prompt": "one two three", "max_tokens": 2}) + "\n"
        + json.dumps({"messages": [{"role": "system", "content": "be brief"},
                                   {"role": "user", "content": "hi there"}]}) + "\n"
    )
    assert [p.text for p in read_prompts(text)] == ["alpha beta", "gamma delta epsilon"]
    with serve() as (url, st):
        res = run_load(LoadSpec(url, duration_s=60, concurrency=1, prompts_file=text, max_tokens=3),
                       finish=until_served(st, 3))
        assert [b["prompt"] for b in st.bodies[:3]] == ["alpha beta", "gamma delta epsilon", "alpha beta"]
        assert all(r.output_tokens == 3 for r in res.records)
        st.bodies.clear()
        st.n_requests = 0
        res = run_load(LoadSpec(url, duration_s=60, concurrency=1, prompts_file=jsonl, max_tokens=5,
                                endpoint="chat"), finish=until_served(st, 2))
    first, second = st.bodies[0], st.bodies[1]
    assert first["messages"] == [{"role": "user", "content": "one two three"}] and first["max_tokens"] == 2
    assert second["messages"][0] == {"role": "system", "content": "be brief"} and second["max_tokens"] == 5
    assert [r.output_tokens for r in res.records[:2]] == [2, 5]
    assert res.records[1].prompt_tokens == 5  # usage: 4 words + 1


def test_generated_prompt_lengths_follow_the_seeded_distribution() -> None:
    with serve(Behaviour(usage=False)) as (url, st):
        res = run_load(LoadSpec(url, duration_s=0.4, concurrency=1, max_tokens=1,
                                prompt_tokens="uniform:5:40", seed=3))
    rng = random.Random(3)  # the driver draws the length, then the words, per request
    for body, rec in zip(st.bodies, res.records, strict=True):
        n = rng.randint(5, 40)
        words = rng.choices(VOCAB, k=n)
        assert body["prompt"] == " ".join(words) and rec.prompt_tokens == n


def test_length_distributions() -> None:
    rng = random.Random(0)
    assert {parse_length_dist("fixed:64").sample(rng) for _ in range(10)} == {64}
    assert parse_length_dist("32").sample(rng) == 32
    uni = [parse_length_dist("uniform:10:20").sample(rng) for _ in range(2000)]
    assert min(uni) == 10 and max(uni) == 20
    norm = [parse_length_dist("normal:200:20").sample(rng) for _ in range(4000)]
    assert statistics.mean(norm) == pytest.approx(200, abs=2) and statistics.pstdev(norm) == pytest.approx(20, rel=0.08)
    logn = [parse_length_dist("lognormal:100:0.5").sample(rng) for _ in range(4000)]
    assert statistics.median(logn) == pytest.approx(100, rel=0.05)
    assert statistics.quantiles(logn, n=20)[-1] / statistics.median(logn) == pytest.approx(2.28, rel=0.1)
    assert min(parse_length_dist("normal:2:50").sample(rng) for _ in range(200)) == 1  # clamped


@pytest.mark.parametrize("spec", ["", "fixed", "fixed:0", "fixed:2.5", "uniform:9:3", "normal:10",
                                  "lognormal:100:-1", "gamma:3:4", "fixed:abc", "normal:nan:1"])
def test_bad_distribution_spec(spec: str) -> None:
    with pytest.raises(LoadInputError) as exc:
        parse_length_dist(spec)
    assert str(exc.value).startswith(f"{spec}: bad length distribution: expected fixed:N")


@pytest.fixture
def dead_url() -> Iterator[str]:
    with serve() as (url, _):
        pass
    yield url  # the port is closed now


def test_bad_inputs_are_one_line_errors(tmp_path: Path, dead_url: str) -> None:
    missing = tmp_path / "nope.txt"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": "x", "max_tokens": 0}\n')
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"prompt": "ok"}\n\n{"prompt": \n')
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text('{"text": "no prompt key"}\n')
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    cases = [
        (LoadSpec(dead_url, 1, concurrency=1, prompts_file=missing), f"{missing}: cannot read prompts file: "),
        (LoadSpec(dead_url, 1, concurrency=1, prompts_file=bad), f"{bad}: line 2: max_tokens must be"),
        (LoadSpec(dead_url, 1, concurrency=1, prompts_file=broken), f"{broken}: line 3: not JSON: "),
        (LoadSpec(dead_url, 1, concurrency=1, prompts_file=wrong), f"{wrong}: line 1: expected 'prompt'"),
        (LoadSpec(dead_url, 1, concurrency=1, prompts_file=empty), f"{empty}: no prompts in the file"),
        (LoadSpec("ftp://host/x", 1, concurrency=1), "ftp://host/x: expected an http:// or https:// URL"),
        (LoadSpec("localhost:8000", 1, concurrency=1), "localhost:8000: expected an http:// or https:// URL"),
        (LoadSpec(dead_url, 1), f"{dead_url}: give a concurrency"),
        (LoadSpec(dead_url, 1, concurrency=0), f"{dead_url}: concurrency must be ≥ 1"),
        (LoadSpec(dead_url, 1, rate_rps=-2), f"{dead_url}: request rate must be > 0"),
        (LoadSpec(dead_url, 0, concurrency=1), f"{dead_url}: duration must be > 0 s"),
        (LoadSpec(dead_url, 1, concurrency=1, prompt_tokens="zipf:3"), "zipf:3: bad length distribution"),
        (LoadSpec(dead_url, 1, concurrency=1), f"{dead_url}: server unreachable: "),
    ]
    for spec, message in cases:
        with pytest.raises(LoadInputError) as exc:
            run_load(spec)
        assert isinstance(exc.value, TracekitError)
        assert str(exc.value).startswith(message), (str(exc.value), message)
        assert "\n" not in str(exc.value)
    with pytest.raises(LoadInputError, match="server unreachable after 0.3 s"):
        wait_for_endpoint(dead_url, timeout_s=0.3)


@pytest.fixture(scope="module")
def tiny_server() -> Iterator[str]:
    yield from serve_example(stop_timeout=20)


def test_tiny_decoder_server_real_decode(tiny_server: str) -> None:
    wait_for_endpoint(tiny_server, timeout_s=5)
    res = run_load(LoadSpec(tiny_server, duration_s=1.5, concurrency=2, max_tokens=32, prompt_tokens="uniform:8:64"))
    assert res.model == "tiny-decoder"  # from GET /v1/models
    assert len(res.records) >= 2
    for r in res.records:
        assert r.error is None and r.token_count_source == "usage"
        assert r.output_tokens == 32 and len(r.itl_ns) == 31
        assert r.e2e_ns < 1e9  # 32 real decode steps of the tiny model: well under a second
    chat = run_load(LoadSpec(tiny_server, duration_s=0.5, concurrency=1, max_tokens=8, endpoint="chat"))
    assert chat.records and all(r.error is None and r.output_tokens == 8 for r in chat.records)
    # the prompt keeps its last (context − max_tokens) tokens: prompt_tokens is what was prefilled
    long = run_load(LoadSpec(tiny_server, duration_s=0.1, concurrency=1, max_tokens=24, prompt_tokens="fixed:2000"))
    assert long.records[0].prompt_tokens == 1024 - 24 and long.records[0].output_tokens == 24


def test_steady_state_waits_for_the_warmup_requests_and_says_when_it_gave_up() -> None:
    """A sweep point's window opens once every request sent during the warm-up has completed. While
    the server holds them, the wait gives up after its timeout: the load's verdict is
    ``not_reached`` (the run's ``steady_state`` tag) and a note says why; once they can complete,
    it is ``reached``."""
    from tracekit.collectors.capture_backends.window import LoadRunner

    never = threading.Event()
    hold = threading.Event()
    with serve(Behaviour(hold=hold)) as (url, st):
        runner = LoadRunner(LoadSpec(url, duration_s=300, concurrency=2, max_tokens=2))
        while runner.sent < 2 or st.n_requests < 2:
            time.sleep(0.01)
        assert runner.wait_steady(never, lambda: True, lambda: None, timeout_s=0.2) is False
        assert runner.steady == "not_reached" and runner.done < runner.sent
        hold.set()  # the held requests complete, so the load stops cleanly
        held = runner.stop()
    assert held is not None and held.steady_state == "not_reached"
    assert any("had not reached steady state 0.2 s after the warm-up" in n for n in held.notes)
    with serve(Behaviour()) as (url, st):
        runner = LoadRunner(LoadSpec(url, duration_s=300, concurrency=2, max_tokens=2))
        while runner.sent < 2:
            time.sleep(0.01)
        sent = runner.sent
        assert runner.wait_steady(never, lambda: True, lambda: None, timeout_s=600) is False
        assert runner.steady == "reached" and runner.done >= sent
        runner.window_opens()
        drained = runner.stop()
    assert drained is not None and drained.steady_state == "reached"  # a closed loop is never past capacity
    assert not any("steady state" in n or "capacity" in n for n in drained.notes)
    assert drained.backlog_growth(0, 2**62) is None


def test_an_open_loop_whose_queue_grows_in_the_window_is_past_capacity() -> None:
    """Requests arrive at 100/s and the server answers none of them while the window is open (it
    holds them): arrivals outrun completions beyond chance, so the verdict is ``past_capacity``
    with the counts in a note, although the warm-up drained. A server that keeps up is not."""
    from tracekit.collectors.capture_backends.window import LoadRunner

    never = threading.Event()
    hold = threading.Event()
    hold.set()
    with serve(Behaviour(hold=hold)) as (url, st):
        runner = LoadRunner(LoadSpec(url, duration_s=300, rate_rps=100.0, max_tokens=2))
        while runner.sent < 5:
            time.sleep(0.01)
        assert runner.wait_steady(never, lambda: True, lambda: None, timeout_s=600) is False
        assert runner.steady == "reached"
        hold.clear()  # from now on the server holds every request: the queue grows
        runner.window_opens()
        at_open = st.n_requests
        while st.n_requests < at_open + 80:
            time.sleep(0.01)
        stopper = threading.Thread(target=lambda: verdicts.append(runner.stop()))
        verdicts: list[object] = []
        stopper.start()
        while not runner._finish.is_set():  # the window has closed: release the held requests
            time.sleep(0.01)
        hold.set()
        stopper.join(timeout=120)
    [res] = verdicts
    assert res is not None and res.steady_state == "past_capacity"  # type: ignore[attr-defined]
    [note] = [n for n in res.notes if n.startswith("past capacity: ")]  # type: ignore[attr-defined]
    m = re.match(r"past capacity: (\d+) requests arrived in the window's [\d.]+ s and (\d+) completed, so the queue "
                 r"grew by (\d+)", note)
    assert m, note
    arrived, completed, grew = map(int, m.groups())
    assert arrived >= 70 and grew == arrived - completed > 0  # some of the 80 were due before the open


def _open_loop_result(arrivals_ns: list[int], latency_ns: int) -> LoadResult:
    """An open loop's result whose every request is sent at its arrival and ends ``latency_ns`` later."""
    records = [RequestRecord(i, t, latency_ns // 2, [], latency_ns, 8, 2, 200, None, "usage")
               for i, t in enumerate(arrivals_ns)]
    return LoadResult(LoadSpec("http://127.0.0.1:9", duration_s=60, rate_rps=10.0), arrivals_ns[0],
                      arrivals_ns[-1] + latency_ns, records, arrivals_ns=arrivals_ns)


def test_the_window_counts_arrivals_and_completions_inside_it() -> None:
    """The counts behind ``past_capacity``: a server keeping up (every request done 50 ms after
    it arrives, one every 100 ms) completes about what arrives, and arrivals or completions
    outside the window are not counted; one falling behind (each request ending later than the
    last) leaves a shortfall that grows with the window. A closed loop has no count."""
    ms = 1_000_000
    steady = _open_loop_result([i * 100 * ms for i in range(200)], 50 * ms)
    assert steady.backlog_growth(5_000 * ms, 15_000 * ms) == (101, 100)  # arrivals 50..150; completions 50..149
    assert not past_capacity(*steady.backlog_growth(5_000 * ms, 15_000 * ms))  # type: ignore[misc]
    # service slower than arrivals: request i ends at i × 150 ms (a FIFO server at 2/3 of the rate)
    arrivals = [i * 100 * ms for i in range(300)]
    behind = _open_loop_result(arrivals, 0)
    behind.records = [replace(r, e2e_ns=i * 50 * ms + 1) for i, r in enumerate(behind.records)]
    short = behind.backlog_growth(2_000 * ms, 8_000 * ms)
    long = behind.backlog_growth(2_000 * ms, 26_000 * ms)
    assert short is not None and long is not None
    assert short[0] - short[1] < long[0] - long[1]  # the shortfall grows with the window
    assert past_capacity(*long) and not past_capacity(*short)
    closed = LoadResult(LoadSpec("http://127.0.0.1:9", duration_s=60, concurrency=2), 0, 1, [])
    assert closed.backlog_growth(0, 1) is None


@pytest.mark.parametrize(("arrived", "completed", "past"), [
    (100, 50, True), (100, 95, False), (50, 48, False), (10, 0, True), (4, 0, False), (0, 0, False), (30, 40, False),
])
def test_past_capacity_needs_a_shortfall_beyond_chance(arrived: int, completed: int, past: bool) -> None:
    assert past_capacity(arrived, completed) is past
