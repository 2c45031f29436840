"""The Kineto parser under hostile input (issue 17): the C scanner and the pure-Python path give
the same verdict and store the same rows; deep nesting, long events, headers and trailers are
bounded and refused in one line; physics-breaking events are dropped and counted.

Bombs are built here with zlib at level 9 (a few hundred KB each) and scaled to the test with
``TRACEKIT_MAX_EVENT_BYTES``; the 2 GiB figures of docs/security.md were measured by hand with
:func:`_bomb` and the same checks."""

from __future__ import annotations

import itertools
import json
import os
import zlib
from pathlib import Path

import duckdb
import pytest
from fuzz_kineto import check_both_paths, mutations

import tracekit
from tracekit.errors import TraceInputError
from tracekit.limits import InputLimitError
from tracekit.parsers.native import built

SCANNER_C = built("_kineto_scan")  # the C scanner, None when it is not built
ROOT = Path(__file__).resolve().parent.parent
native_only = pytest.mark.skipif(
    SCANNER_C is None, reason="the C scanner is not built here (no C compiler at install)"
)
PATHS = [pytest.param(False, marks=native_only, id="C"), pytest.param(True, id="pure")]


@pytest.fixture(autouse=True)
def _path_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRACEKIT_MAX_EVENT_BYTES", raising=False)
    monkeypatch.delenv("TRACEKIT_PURE_PYTHON", raising=False)


def _ingest(path: Path, store: Path, pure: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEKIT_PURE_PYTHON", "1" if pure else "0")
    tracekit.ingest([path], store=store, format_name="kineto")


def _trace(events: list[dict[str, object]], **top: object) -> dict[str, object]:
    return {"schemaVersion": 1, **top, "traceEvents": events, "traceName": "t"}


def _kernel(i: int, **kw: object) -> dict[str, object]:
    return {"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 10 + i, "dur": 2,
            "args": {"correlation": i, "device": 0, "stream": 7}, **kw}


# ---------------------------------------------------------------------------------------------
# Same verdict, same rows


@native_only
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mutated_traces_get_the_same_verdict_on_both_paths(seed: int, tmp_path: Path) -> None:
    """A slice of the seeded mutator (tests/fuzz_kineto.py; run it as a script for thousands):
    no crash, one-line refusals, both refuse or both store the same rows."""
    verdicts = set()
    for data in itertools.islice(mutations(seed), 25):
        native, _ = check_both_paths(data, tmp_path)
        verdicts.add(native.refused is None)
    assert verdicts == {True, False}  # the mutator makes both accepted and refused inputs


@native_only
@pytest.mark.parametrize("where", ["args", "header", "trailer", "event"])
def test_nesting_is_refused_past_the_same_depth_on_both_paths(where: str, tmp_path: Path) -> None:
    """512 levels (inside an event, or in a top-level value) are read by both paths; 513 are
    refused by both in one line, never a
    RecursionError (msgspec and json recurse; 100,000 levels crashed the pure path before)."""

    def doc(depth: int) -> bytes:
        depth -= where == "args"  # the args object is one of the levels inside its event
        nest = b"[" * depth + b"]" * depth
        body = json.dumps(_trace([_kernel(1), _kernel(2)])).encode()
        if where == "args":
            return body.replace(b'"args": {', b'"args": {"deep": ' + nest + b", ", 1)
        if where == "header":
            return b'{"deep": ' + nest + b", " + body[1:]
        if where == "trailer":
            return body[:-1] + b', "deep": ' + nest + b"}"
        return body.replace(b'"traceEvents": [', b'"traceEvents": [{"ph": "i", "s": ' + nest + b"}, ", 1)

    for depth in (512, 513, 100_000):
        native, pure = check_both_paths(doc(depth), tmp_path)
        if depth == 512:
            assert native.refused is None, native.refused
        else:
            assert native.refused is not None and "nesting deeper than 512 levels" in native.refused
            assert pure.refused is not None and "nesting deeper than 512 levels" in pure.refused


@native_only
@pytest.mark.parametrize(
    ("change", "accepted"),
    [
        ({"args": True}, False),
        ({"args": []}, False),
        ({"args": "kernel"}, False),
        ({"args": None}, True),
        ({"ts": "12.5"}, True),
        ({"dur": [1]}, False),
        ({"ph": 5}, False),
        ({"pid": 1.5}, False),
    ],
)
def test_wrongly_typed_values_get_the_same_verdict(change: dict[str, object], accepted: bool, tmp_path: Path) -> None:
    data = json.dumps(_trace([_kernel(1), _kernel(2, **change)])).encode()
    native, _ = check_both_paths(data, tmp_path)
    assert (native.refused is None) is accepted, native.refused


@native_only
@pytest.mark.parametrize(
    ("event", "accepted"),
    [
        # each one disagreed before (found by tests/fuzz_kineto.py)
        (b'{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "cat": 3.6, "cat": "cpu_op"}', False),
        (b'{"ph": "X", "cat": "cpu_op", "name": "a", "pid": -0, "tid": 1, "ts": 1}', True),
        (b'{"ph": "X", "cat": "cpu_op", "name": "a", "ts": true, "dur": false}', True),
        (b'{"ph": "X", "cat": "cpu_op", "name": "a\\ud800", "ts": 1}', False),
        (b'{"ph": "i", "cat": "cpu_op", "name": "a\\udc00", "ts": 1}', False),
        (b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "args": {"zz": "\xff"}}', False),
        (b'{"ph": "i", "cat": "kernel", "name": "k", "ts": 1, "args": {"zz": "\xff"}}', True),
        (b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "args": {"stream": 5, "stream": 6}}', False),
        (b'{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "args": {"Input Dims": [1e308, 1.5e-5, 1e16, 1e22, -1e-05]}}', True),
        (b'{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1e300}', False),
    ],
)
def test_fuzz_findings_get_the_same_verdict_and_rows(event: bytes, accepted: bool, tmp_path: Path) -> None:
    data = b'{"traceEvents": [' + json.dumps(_kernel(1)).encode() + b", " + event + b"]}"
    native, pure = check_both_paths(data, tmp_path)
    assert (native.refused is None) is accepted, native.refused
    for refused in (native.refused, pure.refused):  # the cause, not "Current transaction is aborted"
        assert refused is None or "transaction" not in refused.lower()


@native_only
def test_a_second_trace_events_key_is_ignored_by_both_paths(tmp_path: Path) -> None:
    body = json.dumps(_trace([_kernel(1)])).encode()
    data = body[:-1] + b', "traceEvents": [' + json.dumps(_kernel(2)).encode() + b"]}"
    native, _ = check_both_paths(data, tmp_path)
    assert native.refused is None and native.summary is not None
    assert native.summary[0][0] == 1  # one device row: the first array's kernel


@native_only
@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
@pytest.mark.parametrize("where", ["ts", "header", "trailer"])
def test_nan_and_infinity_are_not_json_on_either_path(constant: bytes, where: str, tmp_path: Path) -> None:
    body = json.dumps(_trace([_kernel(1), _kernel(2)])).encode()
    if where == "ts":
        data = body.replace(b'"ts": 12', b'"ts": ' + constant, 1)
    elif where == "header":
        data = b'{"baseTimeNanoseconds": ' + constant + b", " + body[1:]
    else:
        data = body[:-1] + b', "x": ' + constant + b"}"
    assert data != body
    native, pure = check_both_paths(data, tmp_path)
    assert native.refused is not None and pure.refused is not None


# ---------------------------------------------------------------------------------------------
# Physics


@pytest.mark.parametrize("pure", PATHS)
def test_impossible_times_are_dropped_and_counted(pure: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = [
        _kernel(1),
        _kernel(2, dur=-1),  # negative duration
        _kernel(3, dur=-0.0005),
        _kernel(4, ts=5e15),  # 5e18 ns: beyond 2^62
        _kernel(5, dur=4.7e15),
        {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 0, "tid": 1, "ts": 11, "dur": -3},
        {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 0, "tid": 1, "ts": 11, "dur": 3},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_trace(events)))
    _ingest(path, tmp_path / "s.duckdb", pure, monkeypatch)
    con = duckdb.connect(str(tmp_path / "s.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT name, dur_ns FROM device_activity").fetchall() == [("k1", 2000)]
        assert con.execute("SELECT count(*), min(dur_ns) FROM host_events").fetchone() == (1, 3000)
        n_invalid, n_other = con.execute("SELECT n_invalid_events, n_other_skipped FROM rank_meta").fetchone()
        assert (n_invalid, n_other) == (5, 0)
    finally:
        con.close()


@pytest.mark.parametrize("pure", PATHS)
def test_metadata_numbers_out_of_range_are_dropped_not_a_crash(pure: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = _trace([_kernel(1)], distributedInfo={"rank": 2**64, "world_size": 2**40}, schemaVersion=2**70,
                 metadata={"timestamp": 1e300},
                 deviceProperties=[{"id": 0, "name": "G", "numSms": 4.5e15, "totalGlobalMem": 2**80,
                                    "warpSize": 1e400}])
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc).replace("Infinity", "1e400"))
    _ingest(path, tmp_path / "s.duckdb", pure, monkeypatch)
    con = duckdb.connect(str(tmp_path / "s.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT rank, world_size, schema_version FROM rank_meta").fetchall() == [(0, None, None)]
        assert con.execute("SELECT name, compute_units, memory_bytes, warp_size FROM device_meta").fetchall() == [
            ("G", None, None, None)]
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------
# Bombs: long events, headers and trailers


def _bomb(prefix: bytes, fill: bytes, n: int, suffix: bytes) -> bytes:
    """gzip (zlib level 9) of ``prefix + fill * (n // len(fill)) + suffix``, built in pieces."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [z.compress(prefix)]
    piece = fill * ((1 << 20) // len(fill))
    for _ in range(n // len(piece)):
        out.append(z.compress(piece))
    out += [z.compress(suffix), z.flush()]
    return b"".join(out)


def _long_name(n: int) -> bytes:
    head = b'{"traceEvents": [' + json.dumps(_kernel(0)).encode() + b', {"ph": "X", "cat": "kernel", "name": "'
    return _bomb(head, b"k", n, b'", "ts": 1, "dur": 1}]}')


class _CountingScanner:
    """Wraps the C scanner, adding up the bytes each scan() is handed."""

    scanned = 0
    real = SCANNER_C.Scanner if SCANNER_C is not None else None

    def __init__(self, *args: object) -> None:
        assert self.real is not None
        self._sc = self.real(*args)

    def scan(self, buf: bytearray, final: bool = False) -> int:
        type(self).scanned += len(buf)
        return int(self._sc.scan(buf, final))

    def take(self, table: int, columns: object = None) -> object:
        return self._sc.take(table, columns)

    def pending(self) -> tuple[int, int, int, int]:
        return self._sc.pending()

    done = property(lambda self: self._sc.done)
    n_events = property(lambda self: self._sc.n_events)
    n_python = property(lambda self: self._sc.n_python)
    n_flow = property(lambda self: self._sc.n_flow)


@native_only
def test_a_long_event_is_scanned_in_linear_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 32 MiB kernel name: the scanner is handed about twice its bytes in all (it was handed
    the unfinished event again with every 1 MiB block: ~550 MB for this one, 2 TB for 2 GiB)."""
    n = 32 << 20
    path = tmp_path / "long.json.gz"
    path.write_bytes(_long_name(n))
    monkeypatch.setattr(SCANNER_C, "Scanner", _CountingScanner)
    _CountingScanner.scanned = 0
    _ingest(path, tmp_path / "s.duckdb", False, monkeypatch)
    assert n < _CountingScanner.scanned < 3 * n
    con = duckdb.connect(str(tmp_path / "s.duckdb"), read_only=True)
    assert con.execute("SELECT max(length(name)) FROM device_activity").fetchone() == (n,)
    con.close()


def test_the_pure_path_cuts_a_long_event_in_linear_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tracekit.parsers import _kineto_json

    calls = []
    real_cut = _kineto_json._cut
    monkeypatch.setattr(_kineto_json, "_cut", lambda kf, buf: calls.append(len(buf)) or real_cut(kf, buf))
    n = 16 << 20
    path = tmp_path / "long.json.gz"
    path.write_bytes(_long_name(n))
    _ingest(path, tmp_path / "s.duckdb", True, monkeypatch)
    assert sum(calls) < 4 * n  # each failed cut waits for twice the bytes


@pytest.mark.parametrize("pure", PATHS)
@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("event", "an event longer than 4,194,304 bytes at byte "),
        ("header", "no traceEvents array in the first 4,194,304 bytes"),
        ("no-events", "no traceEvents array in the first 4,194,304 bytes"),
        ("trailer", "longer than 4,194,304 bytes"),
    ],
)
def test_bombs_are_refused_in_one_line_past_the_limit(
    pure: bool, kind: str, words: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """24 MiB inflated from ~25 KB, limit 4 MiB: refused once the limit is passed, naming the
    setting that lifts it (the inflate-ratio cap is lifted so this limit is the one tested)."""
    monkeypatch.setenv("TRACEKIT_MAX_EVENT_BYTES", str(4 << 20))
    monkeypatch.setenv("TRACEKIT_MAX_INFLATE_RATIO", "0")
    n = 24 << 20
    data = {
        "event": _long_name(n),
        "header": _bomb(b'{"deviceProperties": "', b"x", n, b'", "traceEvents": []}'),
        "no-events": _bomb(b'{"schemaVersion": 1, "pad": [', b"0,", n, b"0]}"),
        "trailer": _bomb(b'{"traceEvents": [], "distributedInfo": "', b"x", n, b'"}'),
    }[kind]
    assert len(data) < 1 << 20
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(data)
    with pytest.raises(InputLimitError) as info:
        _ingest(path, tmp_path / "s.duckdb", pure, monkeypatch)
    assert words in str(info.value) and "TRACEKIT_MAX_EVENT_BYTES" in str(info.value)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "s.duckdb").exists()


def _peak_rss_mb(script: str, env: dict[str, str]) -> tuple[int, str]:
    """Run ``script`` in a child Python; (its own peak RSS in MB, its stderr)."""
    from helpers import peak_rss_of_python

    peak, _, err = peak_rss_of_python(script, env=env)
    return peak >> 20, err


@pytest.mark.parametrize("pure", PATHS)
def test_a_header_bomb_is_refused_within_a_bounded_memory(pure: bool, tmp_path: Path) -> None:
    """160 MiB of header string from 160 KB of gzip, limit 8 MiB: refused with the child's peak
    RSS far below what reading it whole takes (the header was decoded whole: > 6 GB for 2 GiB).

    Measured in a child process so that ru_maxrss is the ingest's own (a fresh interpreter with
    tracekit and DuckDB imported: ~100-150 MB)."""
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(_bomb(b'{"deviceProperties": "', b"x", 160 << 20, b'", "traceEvents": []}'))
    env = {**os.environ, "TRACEKIT_MAX_EVENT_BYTES": str(8 << 20), "TRACEKIT_MAX_INFLATE_RATIO": "0",
           "TRACEKIT_PURE_PYTHON": "1" if pure else "0"}
    script = (
        "import sys, tracekit\n"
        "from tracekit.errors import TracekitError\n"
        f"try: tracekit.ingest([{str(path)!r}], store={str(tmp_path / 's.duckdb')!r})\n"
        "except TracekitError as e: print(e, file=sys.stderr)\n"
    )
    peak, err = _peak_rss_mb(script, env)
    assert "no traceEvents array in the first 8,388,608 bytes" in err, err
    assert peak < 260  # reading the 160 MiB header whole needs > 450 MB


@pytest.mark.parametrize("pure", PATHS)
def test_truncated_gzip_of_a_real_trace_is_refused_in_one_line(pure: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = (ROOT / "sample_traces" / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz").read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceInputError) as info:
        _ingest(path, tmp_path / "s.duckdb", pure, monkeypatch)
    assert "\n" not in str(info.value)


def test_the_mutator_is_reproducible() -> None:
    first = list(itertools.islice(mutations(7), 5))
    assert first == list(itertools.islice(mutations(7), 5))
    assert first != list(itertools.islice(mutations(8), 5))
    assert any(d.startswith(b"\x1f\x8b") for d in itertools.islice(mutations(7), 60))


@native_only
@pytest.mark.parametrize("value", [5, "x", {"id": 0}, [1, None], None])
def test_odd_device_properties_are_ignored_by_both_paths(value: object, tmp_path: Path) -> None:
    data = json.dumps(_trace([_kernel(1)], deviceProperties=value)).encode()
    native, _ = check_both_paths(data, tmp_path)  # a crash before: 'int' object is not iterable
    assert native.refused is None
