"""The C scanner of Kineto events (tracekit/parsers/_kineto_scan.c) against the pure-Python path.

The pure-Python path (msgspec + DuckDB's read_json) is the reference: both must store exactly the
same rows, for every corpus trace and for hand-made JSON that exercises what a scanner can get
wrong (escapes, surrogate pairs, number rendering, nested args, block boundaries, bad input).
"""

from __future__ import annotations

import gc
import gzip
import json
import os
import random
from pathlib import Path

import duckdb
import pytest
from conftest import KINETO, SAMPLES, needs_shared
from helpers import run_cli

import tracekit
from tracekit.errors import TraceInputError
from tracekit.parsers import kineto
from tracekit.parsers.native import built

if built("_kineto_scan") is None:
    if os.environ.get("CI"):
        raise RuntimeError("CI must build the C scanner (setup.py); it is missing")
    pytest.skip(
        "the C scanner is not built here (no C compiler when tracekit was installed)",
        allow_module_level=True,
    )
from tracekit.parsers import _kineto_scan as native

TABLES = ("device_activity", "host_events")


def _ingest_both(paths: list[Path], tmp: Path, monkeypatch: pytest.MonkeyPatch, **kw: object) -> Path:
    """Ingest ``paths`` natively into n.duckdb and with the pure-Python path into p.duckdb."""
    for name, pure in (("n", "0"), ("p", "1")):
        monkeypatch.setenv("TRACEKIT_PURE_PYTHON", pure)
        assert kineto.native_scanner_enabled() == (pure == "0")
        for p in paths:
            tracekit.ingest([p], store=tmp / f"{name}.duckdb", **kw)  # type: ignore[arg-type]
    monkeypatch.delenv("TRACEKIT_PURE_PYTHON")
    return tmp


def _differences(tmp: Path, tables: tuple[str, ...] = (*TABLES, "rank_meta")) -> dict[str, tuple[int, int, int]]:
    """table -> (rows, rows only native has, rows only pure-Python has)."""
    con = duckdb.connect(str(tmp / "n.duckdb"), read_only=True)
    con.execute(f"ATTACH '{tmp / 'p.duckdb'}' AS p (READ_ONLY)")
    out = {}
    for t in tables:
        n = con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        a = con.execute(f"SELECT count(*) FROM (FROM {t} EXCEPT ALL FROM p.{t})").fetchone()[0]
        b = con.execute(f"SELECT count(*) FROM (FROM p.{t} EXCEPT ALL FROM {t})").fetchone()[0]
        out[t] = (n, a, b)
    con.close()
    return out


@needs_shared
def test_every_corpus_trace_stores_the_same_rows_both_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sets = sorted(d for d in KINETO.iterdir() if d.is_dir() and d.name != "expected")
    assert len(sets) >= 20
    _ingest_both(sets, tmp_path, monkeypatch)
    diff = _differences(tmp_path)
    assert diff["device_activity"][0] > 50_000 and diff["host_events"][0] > 300_000
    for table, (rows, only_native, only_pure) in diff.items():
        assert (only_native, only_pure) == (0, 0), f"{table}: {rows} rows, {only_native}/{only_pure} differ"


def test_samples_store_the_same_rows_both_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    samples = sorted(SAMPLES.glob("*.pt.trace.json.gz"))
    assert len(samples) >= 2
    _ingest_both(samples, tmp_path, monkeypatch)
    diff = _differences(tmp_path)
    assert diff["host_events"][0] > 10_000  # CPU captures: host events only
    for table, (rows, only_native, only_pure) in diff.items():
        assert (only_native, only_pure) == (0, 0), table


def _tricky_trace() -> dict[str, object]:
    """Events whose values a hand-written scanner could render differently from DuckDB."""
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": 'aten::"quoted"\\back/slash', "pid": 7, "tid": "thread \u00e9",
         "ts": 1700000000000.123, "dur": 0.5,
         "args": {"External id": 5, "Input Dims": [[1, 2048], [], [3]], "Input type": ["float", "", "c10::Half"],
                  "Concrete Inputs": ["", "1.50", "\u00e9\n\t\u0001/"], "flops": 1.5e3,
                  "Sequence number": -0, "Fwd thread id": 12345678901234567890, "stream": True}},
        {"ph": "X", "cat": "kernel", "name": "k\ud83d\ude80", "pid": 0, "tid": 3, "ts": 10.0000005, "dur": 1e-3,
         "args": {"correlation": 99, "device": 0, "stream": 7, "grid": [120, 1, 1], "block": [256, 1, 1],
                  "registers per thread": 32.0, "shared memory": 0, "blocks per SM": 0.9375,
                  "warps per SM": 1e-7, "est. achieved occupancy %": 100, "kind": {"a": [1.50, -0, "x y"]}}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 3, "ts": "12.5", "dur": 3,
         "args": {"bytes": 1048576, "memory bandwidth (GB/s)": 12.000, "external id": 17, "correlation": 100}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 7, "ts": 9, "dur": 2,
         "args": None},
        {"ph": "X", "cat": "python_function", "name": "forward", "pid": 7, "tid": 7, "ts": 1, "dur": 1,
         "args": {"Python id": 1}},
        {"ph": "s", "cat": "ac2g", "id": 99, "pid": 7, "tid": 7, "ts": 9},
        {"ph": "f", "cat": "ac2g", "id": 99, "pid": 0, "tid": 3, "ts": 10, "bp": "e"},
        {"ph": "i", "name": "marker", "pid": 7, "tid": 7, "ts": 3, "s": "t"},
        {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "python"}},
        {"ph": "X", "cat": "user_annotation", "name": 12, "pid": "7", "tid": 7, "ts": 2.25, "dur": 1.125e1},
        {"ph": "X", "cat": None, "name": None, "ts": 4, "dur": 0},
        {},
    ]
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Test GPU", "numSms": 2}],
            "traceEvents": ev, "traceName": "tricky", "baseTimeNanoseconds": 5}


def test_tricky_values_render_as_duckdb_renders_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tricky.json"
    # indent: the scanner must skip whitespace everywhere Kineto's writer puts it
    path.write_text(json.dumps(_tricky_trace(), indent=2, ensure_ascii=True))
    _ingest_both([path], tmp_path, monkeypatch)
    for table, (rows, only_native, only_pure) in _differences(tmp_path).items():
        assert (only_native, only_pure) == (0, 0), table
    con = duckdb.connect(str(tmp_path / "n.duckdb"), read_only=True)
    op = con.execute(
        "SELECT name, tid, start_ns, dur_ns, external_id, input_dims, input_types, concrete_inputs, flops, "
        "sequence_number, stream FROM host_events WHERE trace_category = 'cpu_op'"
    ).fetchone()
    assert op == (
        'aten::"quoted"\\back/slash', "thread \u00e9", 1700000000000123, 500, 5,
        "[[1,2048],[],[3]]", '["float","","c10::Half"]', '["","1.50","\u00e9\\n\\t\\u0001/"]', 1500.0, 0,
        "true",
    )
    k = con.execute(
        "SELECT name, start_ns, dur_ns, grid_x, block_x, registers_per_thread, warps_per_cu, kind, stream "
        "FROM device_activity WHERE category = 'kernel'"
    ).fetchone()
    # 10.0000005 us has 7 decimals: the scanner leaves it to SQL's DECIMAL(24,6) conversion
    assert k == ("k\U0001f680", 10000, 1, 120, 256, 32, 1e-7, '{"a":[1.5,0,"x y"]}', "7")
    memcpy = con.execute("SELECT start_ns, external_id FROM device_activity WHERE category = 'memcpy'").fetchone()
    assert memcpy == (12500, 17)  # ts given as a string; the 2021 spelling "external id"
    ranks = con.execute("SELECT n_trace_events, n_python_events, n_flow_events FROM rank_meta").fetchone()
    assert ranks == (12, 1, 2)
    con.close()


def _scan_all(body: bytes, splits: list[int]) -> tuple[list[tuple[object, ...]], ...]:
    """Feed ``body`` to a Scanner cut at ``splits``; return both tables' rows via DuckDB."""
    sc = native.Scanner(kineto._ARG_KEYS_BYTES, kineto._DEVICE_CATS_BYTES, False)
    buf = bytearray()
    start = 0
    for end in [*splits, len(body)]:
        buf += body[start:end]
        start = end
        n = sc.scan(buf, end == len(body))
        del buf[:n]
    assert sc.done and not buf.strip()
    con = duckdb.connect()
    out = []
    for table in (0, 1):
        batch = sc.take(table)
        assert batch is not None
        con.register("b", batch)
        out.append(con.execute("SELECT * FROM b").fetchall())
        con.unregister("b")
    return tuple(out)


def test_any_block_boundary_gives_the_same_rows() -> None:
    text = json.dumps(_tricky_trace()["traceEvents"], indent=1).encode()
    body = text[1:]  # the scanner starts inside the array
    whole = _scan_all(body, [])
    assert len(whole[0]) == 2 and len(whole[1]) == 4
    for cut in range(1, len(body)):  # every single cut point, including inside escapes and numbers
        assert _scan_all(body, [cut]) == whole, cut
    rng = random.Random(7)
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(body)), 20))
        assert _scan_all(body, cuts) == whole


def test_exact_ns_from_the_scanner_match_decimal_sql() -> None:
    con = duckdb.connect()
    texts = ["0", "-0", "1", "0.0005", "0.0004999", "2.5e3", "1700000000000123.4565", "-3.0005",
             "123456789.999999", "999999999999999.9995", "42.123456", "7.1234565"]
    body = ",".join(f'{{"ph":"X","cat":"kernel","name":"k","ts":{t},"dur":{t}}}' for t in texts) + "]"
    sc = native.Scanner([], kineto._DEVICE_CATS_BYTES, False)
    assert sc.scan(body.encode(), True) == len(body)
    con.register("b", sc.take(0))
    rows = con.execute(
        "SELECT ts, ts_ns, CAST(round(CAST(ts AS DECIMAL(24,6)) * 1000) AS BIGINT) FROM b"
    ).fetchall()
    assert len(rows) == len(texts)
    for text, ns, reference in rows:
        if ns is not None:  # the scanner computed it: must equal the SQL's exact conversion
            assert ns == reference, text
    computed = {t for t, ns, _ in rows if ns is not None}
    assert computed == {"0", "-0", "1", "0.0005", "1700000000000123.4565", "-3.0005", "123456789.999999",
                        "999999999999999.9995", "42.123456"}


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"ph": "X", "ts": 1, "dur": tru}]', "invalid literal"),
        (b'{"ph": "X", "name": "a\x01b"}]', "control character in a string"),
        (b'{"ph": "X", "name": "\\q"}]', "invalid escape"),
        (b'[1, 2]]', "an event is not a JSON object"),
        (b'{"ph": "X"} {"ph": "X"}]', "expected ',' or ']' between events"),
        (b'{"ph": "X", "ts": 01}]', "expected ',' or '}'"),
        (b'{"ph": 5}]', '"ph" is not a string'),
        (b'{"ph": "X", "pid": 1.5}]', "neither a string nor an integer"),
        (b'{"ph": "X", "cat": "cpu_op", "name": "\xff\xfe", "ts": 1}]', "invalid UTF-8"),
    ],
)
def test_malformed_events_are_reported_with_a_reason(body: bytes, reason: str) -> None:
    sc = native.Scanner(kineto._ARG_KEYS_BYTES, kineto._DEVICE_CATS_BYTES, False)
    with pytest.raises(native.ScanError) as info:
        sc.scan(body, True)
    got, offset = info.value.args
    assert reason in got and 0 <= offset < len(body)


def test_truncation_is_reported_only_at_the_end() -> None:
    body = b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1.5, "dur": 2'
    sc = native.Scanner([], kineto._DEVICE_CATS_BYTES, False)
    assert sc.scan(body, False) == 0  # an incomplete event waits for more bytes
    with pytest.raises(native.ScanError) as info:
        sc.scan(body, True)
    assert info.value.args[0] == "truncated"


def test_bad_input_through_the_cli_is_one_line_naming_the_file(tmp_path: Path) -> None:
    plain = gzip.decompress((SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz").read_bytes())
    at = plain.index(b'"ph"', len(plain) // 2)
    bad = tmp_path / "bad.json"
    bad.write_bytes(plain[:at] + b'"ph": "X", "dur": 1e, ' + plain[at:])
    store = tmp_path / "s.duckdb"
    res = run_cli("ingest", str(bad), "--store", str(store))
    assert res.returncode == 2 and not store.exists()
    assert res.stderr.count("\n") == 1
    assert res.stderr.startswith(f"error: {bad}: malformed JSON in traceEvents near byte ")
    assert "invalid number" in res.stderr
    near = int(res.stderr.split("near byte ")[1].split(":")[0].replace(",", ""))
    assert at <= near <= at + 40  # the position is in the whole file's decompressed bytes


def _stored(store: Path, sql: str) -> tuple[object, ...] | None:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(sql).fetchone()
    finally:
        con.close()


def test_read_ahead_is_used_only_for_the_same_file_and_python_flag(tmp_path: Path) -> None:
    """A read-ahead is handed to the ingest explicitly (as the CLI does) and used only when it
    reads the same content with the same python_events; otherwise the ingest reads the file
    itself and stops the read-ahead."""
    path = tmp_path / "tricky.json.gz"
    path.write_bytes(gzip.compress(json.dumps(_tricky_trace()).encode()))
    # asked with Python events: the read-ahead (without them) must not be used
    ahead = kineto.read_ahead([path], python_events=False)
    assert ahead is not None
    tracekit.ingest([path], store=tmp_path / "py.duckdb", python_events=True, read_ahead=ahead)
    assert not ahead.claimed
    assert _stored(tmp_path / "py.duckdb", "SELECT count(*) FROM host_events WHERE category = 'python'") == (1,)
    # a read-ahead of content that changed since is not used either
    ahead = kineto.read_ahead([path], python_events=False)
    assert ahead is not None
    ahead.header()  # it has opened the old content
    data = _tricky_trace()
    data["traceEvents"] = data["traceEvents"][:3]  # type: ignore[index]
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    os.utime(path, ns=(1, 1))
    tracekit.ingest([path], store=tmp_path / "short.duckdb", read_ahead=ahead)
    assert not ahead.claimed
    assert _stored(tmp_path / "short.duckdb", "SELECT n_trace_events FROM rank_meta") == (3,)
    # the matching one is used, once
    ahead = kineto.read_ahead([path], python_events=False)
    assert ahead is not None
    tracekit.ingest([path], store=tmp_path / "again.duckdb", read_ahead=ahead)
    assert ahead.claimed and not ahead.claim(path, False)
    assert _stored(tmp_path / "again.duckdb", "SELECT n_trace_events FROM rank_meta") == (3,)
    # another file's read-ahead is not used (and is stopped)
    other = tmp_path / "other.json"
    other.write_text(json.dumps(_tricky_trace()))
    ahead = kineto.read_ahead([other], python_events=False)
    assert ahead is not None
    tracekit.ingest([path], store=tmp_path / "third.duckdb", read_ahead=ahead)
    assert not ahead.claimed


def test_read_ahead_only_for_kineto_looking_files_with_the_scanner_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_tricky_trace()))
    assert kineto.read_ahead([tmp_path / "missing.json", tmp_path / "x.pb"], python_events=False) is None
    monkeypatch.setenv("TRACEKIT_PURE_PYTHON", "1")
    assert kineto.read_ahead([path], python_events=False) is None  # native.load says no
    monkeypatch.delenv("TRACEKIT_PURE_PYTHON")
    ahead = kineto.read_ahead([tmp_path / "x.pb", path], python_events=True)
    assert ahead is not None and ahead.file.path == path and ahead.file.keep_python
    ahead.cancel()


def test_no_column_table_outlives_its_ingest(tmp_path: Path) -> None:
    path = tmp_path / "tricky.json.gz"
    path.write_bytes(gzip.compress(json.dumps(_tricky_trace()).encode()))
    before = native.live_tables()
    tracekit.ingest([path], store=tmp_path / "s.duckdb")
    assert native.live_tables() == before


def test_a_scan_error_reaches_the_ingest_untouched_store(tmp_path: Path) -> None:
    path = tmp_path / "cut.json"
    text = json.dumps(_tricky_trace())
    path.write_text(text[: text.index('"gpu_memcpy"')])
    with pytest.raises(TraceInputError, match="truncated or malformed JSON"):
        tracekit.ingest([path], store=tmp_path / "s.duckdb")
    assert not (tmp_path / "s.duckdb").exists()


def test_each_batch_is_freed_once_inserted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory stays bounded by a few batches whatever the trace's size: DuckDB must not keep the
    inserted batches until COMMIT (a registered object did: +300 MB on a 1 GB trace)."""
    from tracekit.parsers import _io

    monkeypatch.setattr(_io, "_MAX_OUT", 16 << 10)  # inflated blocks of 16 KiB: a batch each
    monkeypatch.setattr(kineto, "_NATIVE_BATCH_BYTES", 8 << 10)
    monkeypatch.setattr(kineto, "_NATIVE_QUEUE", 2)
    seen: list[int] = []
    items = kineto.ReadAhead.items

    def counting(self: kineto.ReadAhead):  # type: ignore[no-untyped-def]
        for kind, value in items(self):
            if kind == "batch":
                seen.append(native.live_tables())
            yield kind, value

    monkeypatch.setattr(kineto.ReadAhead, "items", counting)
    gc.collect()
    base = native.live_tables()  # scanners other tests left to the garbage collector
    tracekit.ingest([SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"], store=tmp_path / "s.duckdb")
    assert len(seen) > 30  # many batches...
    # ...but never more alive than the scanner's 2 tables, the queue, the one in hand and one
    # being taken
    assert max(seen) - base <= 2 + 2 + 2, (base, seen)


def test_numbers_of_every_magnitude_render_the_same_both_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Doubles from 1e-9 to 1e23 (both signs, 1 to 17 significant digits, every boundary where
    Python's repr and yyjson switch between fixed and exponent notation), as a top-level value
    (the ``stream`` arg, stored as text) and nested in an args object, store the same text both ways."""
    rng = random.Random(7)
    values = [m * 10.0**e for e in range(-9, 24) for m in (1.0, 1.5, -2.25, 1.0000000000000002)]
    values += [rng.uniform(-1, 1) * 10.0 ** rng.randint(-9, 23) for _ in range(200)]
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 1, "ts": i, "dur": 1,
               "args": {"correlation": i, "device": 0, "stream": v, "kind": {"v": [v, -v, [v]]}}}
              for i, v in enumerate(values)]
    path = tmp_path / "numbers.json"
    path.write_text(json.dumps({"traceEvents": events}))
    _ingest_both([path], tmp_path, monkeypatch)
    for table, (rows, only_native, only_pure) in _differences(tmp_path).items():
        assert (only_native, only_pure) == (0, 0), table
    con = duckdb.connect(str(tmp_path / "n.duckdb"), read_only=True)
    streams = {r[0] for r in con.execute("SELECT stream FROM device_activity").fetchall()}
    kinds = {r[0] for r in con.execute("SELECT kind FROM device_activity").fetchall()}
    con.close()
    assert len(streams) >= len(values) - 5 and len(kinds) >= len(values) - 5
    assert {"1e-05", "0.0001", "1e+16", "1000000000000000.0"} <= streams  # Python repr's switches
    assert {'{"v":[1e-7,-1e-7,[1e-7]]}', '{"v":[0.000001,-0.000001,[0.000001]]}', '{"v":[1e21,-1e21,[1e21]]}'} <= kinds
