"""The C helper that reads XEvents from the XSpace wire format (tracekit/parsers/_xplane_wire.c)
against the pure-Python reader through protobuf's wrappers (``_line_events_py``): the same columns,
the same JSON text, on every line of every XPlane file at hand and on a hand-made XSpace with the
awkward cases (repeated keys, interned and compressed strings, numbers at the formatting edges,
aggregated events, a oneof set twice, unknown fields)."""

from __future__ import annotations

import gzip
import json
import os
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import CORPUS, SAMPLES
from fuzz_xplane import varint as _varint

from tracekit.parsers import _xplane_read as xr
from tracekit.parsers.proto import xplane_pb2


def _need_wire() -> None:
    if xr._wire is None:
        if os.environ.get("CI"):
            raise AssertionError("CI must build the C helper tracekit/parsers/_xplane_wire.c")
        pytest.skip("the C helper is not built here (no C compiler when tracekit was installed)")


def _xplane_files() -> list[Path]:
    files = sorted(SAMPLES.glob("*.xplane.pb*"))
    if (CORPUS / "xplane").is_dir():
        files += sorted((CORPUS / "xplane").rglob("*.xplane.pb*"))
    return files


def _same(a: xr._LineEvents, b: xr._LineEvents, where: str) -> None:
    assert (a.n_dropped, a.n_untimed) == (b.n_dropped, b.n_untimed), where
    for col in ("metadata_id", "offset_ps", "dur_ps"):
        assert getattr(a, col).dtype == np.int64, where
        assert np.array_equal(getattr(a, col), getattr(b, col)), (where, col)
    if a.is_op is None or b.is_op is None:
        assert a.is_op is None and b.is_op is None, where
    else:
        assert np.array_equal(a.is_op, b.is_op), where
    assert a.args == b.args, where  # the JSON text itself, not only what it parses to
    assert a.split.keys() == b.split.keys(), where
    for k in a.split:
        assert a.split[k] == b.split[k], (where, k)
        assert [type(v) for v in a.split[k]] == [type(v) for v in b.split[k]], (where, k)


def _chunked(data: memoryview, names: dict[int, str], args: tuple[Any, ...], max_rows: int) -> xr._LineEvents:
    """One line read ``max_rows`` kept events at a time, the chunks put back together."""
    parts, start = [], 0
    while start >= 0:
        ev, start = xr._line_events_wire(data, names, *args, start, max_rows)
        assert len(ev) <= max_rows
        parts.append(ev)
    assert len(parts) >= 2
    return xr._LineEvents(
        sum(p.n_dropped for p in parts), sum(p.n_untimed for p in parts),
        np.concatenate([p.metadata_id for p in parts]), np.concatenate([p.offset_ps for p in parts]),
        np.concatenate([p.dur_ps for p in parts]),
        None if parts[0].is_op is None else np.concatenate([p.is_op for p in parts]),
        [a for p in parts for a in p.args], {k: [v for p in parts for v in p.split[k]] for k in parts[0].split},
    )


def _modes(plane: xplane_pb2.XPlane, names: dict[int, str]) -> list[dict[str, Any]]:
    """The ways the reader reads lines: plain, device split, Python-tracer drop + CPU-op split."""
    python_ids = np.array(sorted(k for k, em in plane.event_metadata.items() if em.name.startswith("$")),
                          dtype=np.int64)
    op_ids = np.array(sorted(k for k, v in names.items() if v == "hlo_op"), dtype=np.int64)
    return [
        {},
        {"split": xr._DEVICE_STATS},
        {"drop_ids": python_ids, "split": xr._CPU_OP_STATS, "op_ids": op_ids},
    ]


def _compare_space(raw: bytes, where: str) -> int:
    space = xplane_pb2.XSpace.FromString(raw)
    stripped, spans = xr._wire.split_space(raw)
    assert [len(x) for x in spans] == [len(p.lines) for p in space.planes], where
    without_events = xplane_pb2.XSpace()
    without_events.CopyFrom(space)
    for plane in without_events.planes:
        for line in plane.lines:
            del line.events[:]
    assert xplane_pb2.XSpace.FromString(stripped) == without_events, where
    view = memoryview(raw)
    n_events = 0
    for plane, plane_spans in zip(space.planes, spans):
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line, (offset, size, count) in zip(plane.lines, plane_spans):
            assert xplane_pb2.XLine.FromString(view[offset : offset + size]) == line, where
            assert count == len(line.events), where
            for mode in _modes(plane, names):
                args = (mode.get("drop_ids"), mode.get("split", ()), mode.get("op_ids"))
                c, end = xr._line_events_wire(view[offset : offset + size], names, *args)
                assert end == -1
                if len(c) > 1:  # read in chunks (as the reader does for long lines): the same rows
                    _same(_chunked(view[offset : offset + size], names, args, max(1, len(c) // 3)), c,
                          f"{where} {plane.name} {line.name} chunked")
                py = xr._line_events_py(line, names, *args)
                _same(c, py, f"{where} {plane.name} {line.name} {sorted(mode)}")
            n_events += len(line.events)
    return n_events


def test_wire_reader_equals_wrappers_on_every_file() -> None:
    _need_wire()
    files = _xplane_files()
    assert files
    total = 0
    for path in files:
        raw = xr._read_bytes(path)
        total += _compare_space(raw, str(path))
    # every compared event counts: the bundled sample alone has 13,439 (a user's clone, no
    # ../shared); with the corpus the total is far larger
    assert total > (30_000 if (CORPUS / "xplane").is_dir() else 10_000)


def _space() -> bytes:
    """A hand-made XSpace with the cases the corpus may not have."""
    space = xplane_pb2.XSpace()
    plane = space.planes.add(id=1, name="/host:CPU")
    stat_names = {1: "s", 2: "d", 3: "u", 4: "i", 5: "b", 6: "ref", 7: "z", 8: "hlo_op", 9: "program_id",
                  10: "hlo_module", 11: "device_offset_ps", 12: "kernel_details", 13: "memcpy_details",
                  14: "interned value"}
    for k, v in stat_names.items():
        plane.stat_metadata[k].id = k
        plane.stat_metadata[k].name = v
    plane.event_metadata[1].name = "op"
    plane.event_metadata[2].name = "$python frame"
    line = plane.lines.add(id=1, name="t1", timestamp_ns=1_000)

    def event(mid: int, offset: int | None = 10, dur: int = 5, occurrences: int | None = None,
              stats: list[tuple[int, str, Any]] = ()) -> xplane_pb2.XEvent:  # type: ignore[assignment]
        e = line.events.add(metadata_id=mid, duration_ps=dur)
        if offset is not None:
            e.offset_ps = offset
        if occurrences is not None:
            e.num_occurrences = occurrences
        for sid, field, value in stats:
            st = e.stats.add(metadata_id=sid)
            if field:
                setattr(st, field, value)
        return e

    gz = gzip.compress(b"inflated by gzip")
    raw_deflate = zlib.compressobj(wbits=-15)
    deflated = raw_deflate.compress("raw deflate é".encode()) + raw_deflate.flush()
    event(1, stats=[(1, "str_value", 'quote " backslash \\ nl \n tab \t ctl \x01 del \x7f é \u2028'),
                    (2, "double_value", 1.5e-05), (3, "uint64_value", 2**64 - 1), (4, "int64_value", -2**63)])
    for d in (1.0, 0.1, 1e16, 1e15, 1.234e-05, -1.5e-05, 9.99e-06, 1e-07, 1e22, -0.0, float("inf"),
              float("nan"), 5e-324, 2.5e300, 123456.0):
        event(1, stats=[(2, "double_value", d)])
    event(1, stats=[(5, "bytes_value", b"\x00\x01\x02"), (6, "ref_value", 14), (7, "compressed_str_value", gz)])
    event(1, stats=[(7, "compressed_str_value", deflated), (6, "ref_value", 999)])
    event(1, stats=[(7, "compressed_str_value", b"not deflate")])
    event(1, stats=[(1, "str_value", "first"), (4, "int64_value", 7), (1, "str_value", "last")])  # repeated key
    event(1, stats=[(77, "int64_value", 3), (4, "", None)])  # no metadata for 77; a stat without a value
    event(1, offset=None, occurrences=4)  # aggregated: no start time
    event(1, offset=None, occurrences=0)  # num_occurrences 0: timed at offset 0
    event(2, stats=[(1, "str_value", "python")])  # dropped as a Python-tracer event
    event(1, stats=[(8, "str_value", "fusion.1"), (9, "int64_value", 12), (10, "ref_value", 14), (1, "str_value", "x")])
    event(1, stats=[(8, "str_value", "fusion.2")])  # an op with nothing else: no args
    event(1, stats=[(11, "uint64_value", 99), (12, "str_value", "grid:1,2,3"), (13, "str_value", "size:64")])
    event(1, offset=-20, dur=0)
    raw = bytearray(space.SerializeToString())
    return bytes(raw)


def test_wire_reader_equals_wrappers_on_awkward_cases() -> None:
    _need_wire()
    raw = _space()
    n = _compare_space(raw, "hand-made")
    assert n == 28
    space = xplane_pb2.XSpace.FromString(raw)
    plane = space.planes[0]
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    view = memoryview(raw)
    offset, size, _ = xr._wire.split_space(raw)[1][0][0]
    ev, _ = xr._line_events_wire(view[offset : offset + size], names, np.array([2], dtype=np.int64),
                                 xr._CPU_OP_STATS, np.array([8], dtype=np.int64))
    assert (ev.n_dropped, ev.n_untimed, len(ev)) == (1, 1, 26)
    assert json.loads(ev.args[0]) == {
        "s": 'quote " backslash \\ nl \n tab \t ctl \x01 del \x7f é \u2028', "d": 1.5e-05,
        "u": 2**64 - 1, "i": -2**63}
    assert ev.args[0].startswith('{"s":"quote \\" backslash \\\\ nl \\n tab \\t ctl \\u0001 del \x7f é')
    assert '"d":0.000015' in ev.args[0]
    doubles = [a.split(":", 1)[1][:-1] for a in ev.args[1:16]]
    assert doubles == ["1.0", "0.1", "1e16", "1000000000000000.0", "0.00001234", "-0.000015", "9.99e-6",
                       "1e-7", "1e22", "-0.0", "null", "null", "5e-324", "2.5e300", "123456.0"]
    assert json.loads(ev.args[16]) == {"b": "<3 bytes>", "ref": "interned value", "z": "inflated by gzip"}
    assert json.loads(ev.args[17]) == {"z": "raw deflate é", "ref": ""}
    assert json.loads(ev.args[18]) == {"z": b"not deflate".hex()}
    assert ev.args[19] == '{"s":"last","i":7}'  # first position, last value (a dict's update)
    assert json.loads(ev.args[20]) == {"77": 3, "i": None}
    assert ev.args[21] is None and ev.offset_ps[21] == 0  # timed with num_occurrences 0, no stats
    assert ev.is_op.tolist() == [False] * 22 + [True, True, False, False]
    assert ev.args[22] == '{"s":"x"}' and ev.args[23] is None
    assert ev.split["hlo_op"][22:24] == ["fusion.1", "fusion.2"]
    assert ev.split["program_id"][22] == 12 and ev.split["hlo_module"][22] == "interned value"
    assert ev.offset_ps[-1] == -20 and ev.dur_ps[-1] == 0
    dev, _ = xr._line_events_wire(view[offset : offset + size], names, None, xr._DEVICE_STATS, None)
    assert dev.is_op is None and dev.n_dropped == 0 and len(dev) == 27
    assert dev.split["device_offset_ps"][-2] == 99 and dev.split["memcpy_details"][-2] == "size:64"
    assert dev.args[-2] is None  # every stat of that event went to its own column


def test_wire_reader_refuses_bad_bytes() -> None:
    _need_wire()
    raw = _space()
    offset, size, _ = xr._wire.split_space(raw)[1][0][0]
    with pytest.raises(ValueError, match="malformed"):
        xr._wire.split_space(raw[: len(raw) // 2])
    # a broken stat deep inside an event: the split checks every event and stat
    i = raw.index(b"fusion.2")
    with pytest.raises(ValueError, match="malformed"):
        xr._wire.split_space(raw[:i - 1] + b"\x7f" + raw[i:])  # the string's length now runs past its message
    with pytest.raises(ValueError, match="malformed"):
        xr._wire.scan_line(raw[offset : offset + size // 2], {})
    with pytest.raises(ValueError, match="sorted"):
        xr._wire.scan_line(raw[offset : offset + size], {}, np.array([3, 1], dtype=np.int64))
    with pytest.raises(TypeError):
        xr._wire.scan_line(raw[offset : offset + size], {"1": "x"})


def test_bytes_the_walk_refuses_are_one_line_and_leave_the_store(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytes the C walk refuses are refused, in one line naming the byte, with the store as it was:
    there is no second, whole-file protobuf parse that could accept what the walk refused (the C
    and pure paths must give one verdict, tests/test_xplane_hostile.py)."""
    import tracekit
    from tracekit.errors import TraceInputError

    _need_wire()
    sample = SAMPLES / "jax_cpu_decode_recompile.xplane.pb.gz"
    store = tmp_path / "a.duckdb"
    tracekit.ingest([SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"], store=store)
    before = store.read_bytes()
    monkeypatch.setattr(xr._wire, "check_space", lambda *a: ("malformed", 1234, 0))
    with pytest.raises(TraceInputError) as info:
        tracekit.ingest([sample], store=store)
    assert "malformed wire data at byte 1,234" in str(info.value) and "\n" not in str(info.value)
    assert store.read_bytes() == before


def test_events_beyond_protobufs_limit_are_read_by_the_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the event-free part of the XSpace goes through protobuf: a capture whose events take
    it past the 2 GiB message limit is still read when the helper is built."""
    _need_wire()
    sample = SAMPLES / "jax_cpu_decode_recompile.xplane.pb.gz"
    raw = gzip.decompress(sample.read_bytes())
    stripped, _ = xr._wire.split_space(raw)
    monkeypatch.setattr(xr, "PROTOBUF_LIMIT", (len(stripped) + len(raw)) // 2)  # between the two
    assert xr.decode_xspace(sample).lines is not None
    with pytest.raises(xr.TraceInputError, match="over protobuf's 2 GiB message limit"):
        xr.read_xspace(sample)  # the whole parse (no helper) says so


def test_pure_python_switch_turns_the_helper_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TRACEKIT_PURE_PYTHON=1 reads XPlane lines through the wrappers only (as for Kineto)."""
    import tracekit

    used: list[str] = []
    real_wire, real_py = xr._line_events_wire, xr._line_events_py
    monkeypatch.setattr(xr, "_line_events_wire", lambda *a: used.append("c") or real_wire(*a))
    monkeypatch.setattr(xr, "_line_events_py", lambda *a: used.append("py") or real_py(*a))
    sample = SAMPLES / "jax_cpu_decode_recompile.xplane.pb.gz"
    monkeypatch.setenv("TRACEKIT_PURE_PYTHON", "1")
    tracekit.ingest([sample], store=tmp_path / "a.duckdb")
    assert used and set(used) == {"py"}
    if xr._wire is not None:
        used.clear()
        monkeypatch.delenv("TRACEKIT_PURE_PYTHON")
        tracekit.ingest([sample], store=tmp_path / "b.duckdb")
        assert used and set(used) == {"c"}


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _space_with_event(event: bytes) -> bytes:
    line = _field(2, b"t1") + _field(4, event)
    return _field(1, _field(2, b"/host:CPU") + _field(3, line))


def test_wire_walk_refuses_what_protobuf_refuses(tmp_path: Path) -> None:
    """The walk checks what protobuf would: field numbers 1 .. 2^29-1 and the UTF-8 of strings
    inside events (protobuf never sees the events when the helper reads them). Such a file fails
    the same way with and without the helper: one line, exit 2, no store."""
    from google.protobuf.message import DecodeError
    from helpers import run_cli

    _need_wire()
    good = _space_with_event(_varint(1 << 3) + _varint(7) + _field(4, _varint(1 << 3) + _varint(1) + _field(5, "é".encode())))
    assert xplane_pb2.XSpace.FromString(good).planes[0].lines[0].events[0].stats[0].str_value == "é"
    xr._wire.split_space(good)
    bad_utf8 = good.replace("é".encode(), b"\xc3\x28")
    big_field = _space_with_event(_varint(1 << 3) + _varint(7) + _varint((1 << 32 | 4) << 3 | 0) + _varint(1))
    field_zero = _space_with_event(_varint(0) + _varint(1))
    for name, raw in (("bad_utf8", bad_utf8), ("big_field", big_field), ("field_zero", field_zero)):
        with pytest.raises(DecodeError):
            xplane_pb2.XSpace.FromString(raw)
        with pytest.raises(ValueError, match="malformed"):
            xr._wire.split_space(raw)
        path = tmp_path / f"{name}.xplane.pb"
        path.write_bytes(raw)
        for env in ({}, {"TRACEKIT_PURE_PYTHON": "1"}):
            store = tmp_path / f"{name}{len(env)}.duckdb"
            r = run_cli("ingest", str(path), "--store", str(store), env=env)
            assert r.returncode == 2, (name, env, r.stderr)
            assert r.stderr.strip().count("\n") == 0 and "not a valid XSpace protobuf" in r.stderr, r.stderr
            assert str(path) in r.stderr and not store.exists()


def test_ref_values_beyond_int64_resolve_to_nothing() -> None:
    """A ref_value is a uint64: 2^64-1 is not the stat id -1 (protobuf's wrappers agree)."""
    _need_wire()
    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU")
    plane.stat_metadata[1].name = "r"
    plane.stat_metadata[-1].name = "negative id"
    e = plane.lines.add(name="t").events.add(metadata_id=1, offset_ps=1)
    e.stats.add(metadata_id=1, ref_value=2**64 - 1)
    raw = space.SerializeToString()
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    offset, size, _ = xr._wire.split_space(raw)[1][0][0]
    c, _ = xr._line_events_wire(memoryview(raw)[offset : offset + size], names, None, (), None)
    py = xr._line_events_py(space.planes[0].lines[0], names, None, (), None)
    assert c.args == py.args == ['{"r":""}']
