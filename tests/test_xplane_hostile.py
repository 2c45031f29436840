"""The XPlane reader under hostile and huge input (issue 17): it streams (memory bounded whatever
the number of lines or events), refuses bombs and oversized fields in one line without
allocating them, and gives the same verdict with and without the C helper on mutated files.

Run as a script, this file is the fuzz worker: ``python tests/test_xplane_hostile.py SEED N MODE``
ingests N mutated inputs of :func:`fuzz_xplane.mutations` (MODE ``c`` or ``pure``) into one shared
store and prints one JSON verdict per input; a crash of the C helper kills only that process.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from fuzz_xplane import field, key, mutations, tiny_space, varint, vfield, write_synthetic


def _worker(seed: int, n: int, mode: str) -> None:
    """Ingest ``n`` mutations of ``seed`` into one store; one JSON line per input on stdout:
    {"i", "verdict": "ok"/"refused"/"crash", "line" (the error), "lines" (its line count),
    "store_same" (after a refusal: the store's sha256 unchanged)}."""
    import tracekit
    from tracekit.errors import TracekitError

    if mode == "pure":
        os.environ["TRACEKIT_PURE_PYTHON"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "s.duckdb"
        tracekit.ingest([_tiny_file(Path(tmp))], store=store)  # the store exists before any refusal
        for i, raw in enumerate(mutations(seed, n)):
            path = Path(tmp) / f"m{i}.xplane.pb"
            path.write_bytes(raw)
            before = hashlib.sha256(store.read_bytes()).hexdigest()
            out: dict[str, Any] = {"i": i, "sha": hashlib.sha256(raw).hexdigest()[:12]}
            try:
                tracekit.ingest([path], store=store)
                out["verdict"] = "ok"
            except TracekitError as exc:
                text = str(exc)
                out.update(verdict="refused", line=text[:300], lines=len(text.strip().splitlines()),
                           store_same=hashlib.sha256(store.read_bytes()).hexdigest() == before)
            except BaseException as exc:  # noqa: BLE001 - what the test counts as a failure
                out.update(verdict="crash", line=f"{type(exc).__name__}: {exc}"[:300])
            print(json.dumps(out), flush=True)
            path.unlink()


def _tiny_file(tmp: Path) -> Path:
    p = tmp / "tiny.xplane.pb"
    p.write_bytes(tiny_space())
    return p


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
    sys.exit(0)


import duckdb
import pytest
from conftest import CORPUS, SAMPLES
from helpers import run_cli, sha256

import tracekit
from tracekit.errors import ConfigError
from tracekit.parsers import _xplane_read as xr
from tracekit.parsers.proto import xplane_pb2

JAX_SAMPLE = SAMPLES / "jax_cpu_decode_recompile.xplane.pb.gz"
PATHS = [pytest.param({}, id="c"), pytest.param({"TRACEKIT_PURE_PYTHON": "1"}, id="pure")]


def _need_wire() -> None:
    if xr._wire is None:
        if os.environ.get("CI"):
            raise AssertionError("CI must build the C helper tracekit/parsers/_xplane_wire.c")
        pytest.skip("the C helper is not built here (no C compiler when tracekit was installed)")


def _store_with_a_run(tmp_path: Path) -> tuple[Path, str]:
    store = tmp_path / "s.duckdb"
    tiny = tmp_path / "tiny.xplane.pb"
    tiny.write_bytes(tiny_space())
    assert run_cli("ingest", str(tiny), "--store", str(store)).returncode == 0
    return store, sha256(store)


def _refused(tmp_path: Path, raw: bytes, env: dict[str, str], phrase: str, name: str = "bad.xplane.pb",
             extra_env: dict[str, str] | None = None) -> str:
    """Ingest ``raw`` into a store holding a run: exit 2, one line naming the file and
    ``phrase``, the store unchanged. Returns the line."""
    store, before = _store_with_a_run(tmp_path)
    path = tmp_path / name
    path.write_bytes(raw)
    res = run_cli("ingest", str(path), "--store", str(store), env={**env, **(extra_env or {})})
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: ") and phrase in lines[0], res.stderr
    assert sha256(store) == before
    return lines[0]


def _rows(store: Path) -> dict[str, list[tuple[Any, ...]]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        out = {}
        for t, cols in (("host_events", "pid, tid, category, name, start_ns, dur_ns, args"),
                        ("device_activity", "device, stream, category, name, start_ns, dur_ns, args")):
            out[t] = con.execute(f"SELECT {cols} FROM {t} ORDER BY ALL").fetchall()
        out["ranks"] = con.execute(
            "SELECT n_trace_events, n_python_events, n_other_skipped FROM rank_meta").fetchall()
        return out
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------
# Streaming


@pytest.mark.parametrize("metadata_first", [False, True], ids=["metadata-after-lines", "metadata-first"])
def test_both_wire_orders_give_the_same_rows_on_both_paths(tmp_path: Path, metadata_first: bool) -> None:
    """TSL writes a plane's metadata after its lines; any order is valid protobuf. Each order,
    each path (C helper, protobuf's wrappers), each kind of plane: the same rows, all of them."""
    host, dev = tmp_path / "host.xplane.pb", tmp_path / "dev.xplane.pb"
    n_host = write_synthetic(host, n_lines=300, events_per_line=3, big_line_events=700, metadata_first=metadata_first)
    n_dev = write_synthetic(dev, n_lines=3, events_per_line=5, big_line_events=900, metadata_first=metadata_first,
                            device=True)
    results = []
    for env in ({}, {"TRACEKIT_PURE_PYTHON": "1"}) if xr._wire is not None else ({"TRACEKIT_PURE_PYTHON": "1"},):
        store = tmp_path / f"s{len(env)}.duckdb"
        for p in (host, dev):
            assert run_cli("ingest", str(p), "--store", str(store), env=env).returncode == 0
        rows = _rows(store)
        assert len(rows["host_events"]) == n_host and len(rows["device_activity"]) == n_dev
        results.append(rows)
    assert all(r == results[0] for r in results)
    # the line's timestamp and the event's offset make each start: line i starts at 1e9 + i ns
    starts = sorted(r[4] for r in results[0]["host_events"] if r[1] == "thread 0000007")
    assert starts == [10**9 + 7 + round((1000 + 7 * i) / 1000) for i in range(3)]


def _peak_rss_of_ingest(path: Path, tmp_path: Path, env: dict[str, str]) -> int:
    """Peak RSS (bytes) of a whole ``tracekit ingest`` process."""
    store = tmp_path / f"{path.name}.duckdb"
    from helpers import peak_rss_of_python

    peak, code, err = peak_rss_of_python("from tracekit.cli.main import main; main()", "ingest", str(path),
                                         "--store", str(store), env=env)
    assert code == 0, err
    return peak


def test_memory_does_not_grow_with_the_number_of_lines(tmp_path: Path) -> None:
    """Ten times the lines (150k more, 450k more events): with DuckDB held to 64 MiB
    (TRACEKIT_MEMORY_LIMIT), peak RSS grows by less than 80 MiB; what grows is DuckDB's own
    buffer of inserted rows, within its limit. Before streaming the reader itself held ~1.2 KB
    per line (every line's protobuf object and span until the end): +186 MB here."""
    small, big = tmp_path / "small.xplane.pb", tmp_path / "big.xplane.pb"
    write_synthetic(small, n_lines=15_000)
    write_synthetic(big, n_lines=165_000)
    env = {"TRACEKIT_MEMORY_LIMIT": "64MiB"}
    growth = _peak_rss_of_ingest(big, tmp_path, env) - _peak_rss_of_ingest(small, tmp_path, env)
    assert growth < 80 << 20, f"+{growth / 2**20:.0f} MiB, {growth / 150_000:.0f} bytes per line"


def _small_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Map and spill past 1 MiB instead of 32 MiB, and release every range (the same code as
    for big files, on a file a test can afford)."""
    monkeypatch.setattr(xr, "IN_MEMORY_BYTES", 1 << 20)
    monkeypatch.setattr(xr, "_RELEASE_BYTES", 0)


def test_a_big_gzip_is_read_from_a_temp_file_that_is_gone_afterwards(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past IN_MEMORY_BYTES inflated, a .gz is inflated into TRACEKIT_TMPDIR and mapped, a plain
    file is mapped; nothing is left in the temp dir afterwards, and the rows are the same as
    through memory, on both paths."""
    plain = tmp_path / "big.xplane.pb"
    n = write_synthetic(plain, n_lines=30_000, events_per_line=2, big_line_events=20_000)
    gz = tmp_path / "big.xplane.pb.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes(), compresslevel=1))
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    monkeypatch.setenv("TRACEKIT_TMPDIR", str(tmpdir))
    tracekit.ingest([plain], store=tmp_path / "memory.duckdb")  # 4 MB: read into memory
    expected = _rows(tmp_path / "memory.duckdb")
    assert len(expected["host_events"]) == n
    _small_limits(monkeypatch)
    for source in (plain, gz):
        decoded = xr.decode_xspace(source)
        try:
            assert decoded.source.mapped is not None
            if source is gz:
                assert decoded.source._file is not None and list(tmpdir.iterdir()) == []  # unlinked at once
        finally:
            decoded.close()
        for env in ("0", "1") if xr._wire is not None else ("1",):
            monkeypatch.setenv("TRACEKIT_PURE_PYTHON", env)
            store = tmp_path / f"{source.name}{env}.duckdb"
            tracekit.ingest([source], store=store)
            assert _rows(store) == expected, (source, env)
    assert list(tmpdir.iterdir()) == []


def test_an_unusable_tmpdir_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A big .gz needs TRACEKIT_TMPDIR: a missing one, or one without room, is a one-line
    setting error and the store is unchanged."""
    plain = tmp_path / "big.xplane.pb"
    write_synthetic(plain, n_lines=30_000)
    gz = tmp_path / "big.xplane.pb.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes(), compresslevel=1))
    store, before = _store_with_a_run(tmp_path)
    _small_limits(monkeypatch)
    monkeypatch.setenv("TRACEKIT_TMPDIR", str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match="TRACEKIT_TMPDIR: .*no such directory") as exc:
        tracekit.ingest([gz], store=store)
    assert "\n" not in str(exc.value) and sha256(store) == before
    monkeypatch.setenv("TRACEKIT_TMPDIR", str(tmp_path))
    monkeypatch.setattr(shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="1,000 bytes free") as exc:
        tracekit.ingest([gz], store=store)
    assert "\n" not in str(exc.value) and sha256(store) == before


# ---------------------------------------------------------------------------------------------
# Bombs and oversized fields


def test_a_gzip_bomb_is_refused_early(tmp_path: Path) -> None:
    """~70 MB of identical lines gzip to ~70 KB (1000x): refused by the shared inflation cap
    after 64 MiB, in one line, without the process growing to the file's size."""
    line = field(3, vfield(1, 5) + field(2, b"t") + vfield(3, 10**9)
                 + field(4, vfield(1, 1) + vfield(2, 5) + vfield(3, 5)) * 4)
    n = (70 << 20) // len(line)
    head = vfield(1, 1) + field(2, b"/host:CPU")
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [c.compress(key(1, 2) + varint(len(head) + n * len(line)) + head)]
    block = line * 10_000
    for _ in range(n // 10_000):
        parts.append(c.compress(block))
    parts.append(c.compress(line * (n % 10_000)) + c.flush())
    raw = b"".join(parts)
    assert len(raw) < (1 << 20)
    text = _refused(tmp_path, raw, {}, "TRACEKIT_MAX_INFLATE_RATIO", name="bomb.xplane.pb.gz")
    assert "inflates more than" in text


@pytest.mark.parametrize("env", PATHS)
@pytest.mark.parametrize("where", ["plane-name", "line-name", "event-stat", "metadata"])
def test_a_field_claiming_2_to_the_60_bytes_is_refused(tmp_path: Path, env: dict[str, str], where: str) -> None:
    """A length of 2^60 is refused as malformed at once (nothing is allocated for it)."""
    huge = varint(1 << 60)
    if where == "plane-name":
        raw = key(1, 2) + varint(20) + key(2, 2) + huge + b"x" * 10
    elif where == "line-name":
        line = key(2, 2) + huge + b"xx"
        raw = field(1, field(2, b"/host:CPU") + key(3, 2) + varint(len(line)) + line)
    elif where == "event-stat":
        stat = vfield(1, 1) + key(5, 2) + huge + b"ab"
        event = vfield(1, 1) + key(4, 2) + varint(len(stat)) + stat
        raw = field(1, field(2, b"/host:CPU") + field(3, field(2, b"t") + field(4, event)))
    else:
        entry = vfield(1, 1) + key(2, 2) + huge
        raw = field(1, field(2, b"/host:CPU") + key(4, 2) + varint(len(entry)) + entry)
    if env and xr._wire is None:
        pytest.skip("one path only without the C helper")
    _refused(tmp_path, raw, env, "not a valid XSpace protobuf")


def _space_with_stat(value_field: int, payload: bytes, *, in_metadata: bool = False) -> bytes:
    stat = vfield(1, 1) + field(value_field, payload)
    if in_metadata:
        plane = (field(2, b"/device:TPU:0")
                 + field(4, vfield(1, 1) + field(2, vfield(1, 1) + field(2, b"op") + field(5, stat)))
                 + field(3, field(2, b"XLA Ops") + field(4, vfield(1, 1) + vfield(2, 1) + vfield(3, 2))))
    else:
        plane = field(2, b"/host:CPU") + field(3, field(2, b"t") + field(4, vfield(1, 1) + vfield(2, 1) + field(4, stat)))
    return field(1, plane + field(5, vfield(1, 1) + field(2, vfield(1, 1) + field(2, b"s"))))


@pytest.mark.parametrize("env", PATHS)
@pytest.mark.parametrize("where", ["event-str", "event-bytes", "metadata-bytes"])
def test_a_field_longer_than_the_event_limit_is_refused(tmp_path: Path, env: dict[str, str], where: str) -> None:
    """A string/bytes field over TRACEKIT_MAX_EVENT_BYTES (1 MiB here) is refused in one line
    naming the override, on both paths; 1 MiB itself is read."""
    if env and xr._wire is None:
        pytest.skip("one path only without the C helper")
    limit = {"TRACEKIT_MAX_EVENT_BYTES": "1MiB"}
    kinds = {"event-str": (5, False), "event-bytes": (6, False), "metadata-bytes": (6, True)}
    value_field, in_meta = kinds[where]
    too_long = _space_with_stat(value_field, b"a" * ((1 << 20) + 1), in_metadata=in_meta)
    text = _refused(tmp_path, too_long, env, "TRACEKIT_MAX_EVENT_BYTES", extra_env=limit)
    assert "1,048,577-byte field" in text
    ok = tmp_path / "ok.xplane.pb"
    ok.write_bytes(_space_with_stat(value_field, b"a" * (1 << 20), in_metadata=in_meta))
    res = run_cli("ingest", str(ok), "--store", str(tmp_path / "ok.duckdb"), env={**env, **limit})
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("env", PATHS)
def test_a_compressed_string_bomb_is_refused(tmp_path: Path, env: dict[str, str]) -> None:
    """A compressed_str_value inflating past TRACEKIT_MAX_EVENT_BYTES: refused in one line on
    both paths, having inflated no more than the limit (1 MiB of 3 MiB here)."""
    if env and xr._wire is None:
        pytest.skip("one path only without the C helper")
    bomb = gzip.compress(b"x" * (3 << 20))
    _refused(tmp_path, _space_with_stat(8, bomb), env, "TRACEKIT_MAX_EVENT_BYTES",
             extra_env={"TRACEKIT_MAX_EVENT_BYTES": "1MiB"})
    assert xr._inflate_stat(gzip.compress(b"y" * 100), 100) == "y" * 100
    with pytest.raises(OverflowError):
        xr._inflate_stat(gzip.compress(b"y" * 101), 100)
    assert xr._inflate_stat(gzip.compress(b"y" * 100)[:-12], 1000) == gzip.compress(b"y" * 100)[:-12].hex()


def test_too_many_planes_is_refused(tmp_path: Path) -> None:
    raw = field(1, field(2, b"/host:CPU")) * (xr.MAX_PLANES + 1)
    _refused(tmp_path, raw, {}, "planes")


# ---------------------------------------------------------------------------------------------
# Fuzz: the same verdict on both paths, one line, the store unchanged, no crash


def _run_worker(seed: int, n: int, mode: str) -> list[dict[str, Any]]:
    proc = subprocess.run([sys.executable, str(Path(__file__)), str(seed), str(n), mode],
                          capture_output=True, text=True, timeout=3600, check=False)
    out = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert proc.returncode == 0, (f"{mode} worker died (signal {-proc.returncode}) after input "
                                  f"{len(out)} of seed {seed}: {proc.stderr[-2000:]}")
    assert len(out) == n
    return out


def fuzz(seed: int, n: int) -> dict[str, Any]:
    """Run ``n`` mutations of ``seed`` through both paths (each in its own process); return the
    counts and the problems found (an empty ``problems`` list is a pass)."""
    modes = ["c", "pure"] if xr._wire is not None else ["pure"]
    runs = {m: _run_worker(seed, n, m) for m in modes}
    problems = []
    for m, results in runs.items():
        for r in results:
            if r["verdict"] == "crash":
                problems.append(f"{m} #{r['i']}: {r['line']}")
            elif r["verdict"] == "refused" and (r["lines"] != 1 or not r["store_same"]):
                problems.append(f"{m} #{r['i']}: {r['lines']} lines, store same: {r['store_same']}: {r['line']}")
    if len(modes) == 2:
        for c, p in zip(runs["c"], runs["pure"]):
            if c["verdict"] != p["verdict"]:
                problems.append(f"#{c['i']} ({c['sha']}): C {c['verdict']} ({c.get('line')}), "
                                f"pure {p['verdict']} ({p.get('line')})")
    first = runs[modes[0]]
    return {"n": n, "paths": modes, "refused": sum(r["verdict"] == "refused" for r in first),
            "accepted": sum(r["verdict"] == "ok" for r in first), "problems": problems}


def test_mutated_inputs_same_verdict_on_both_paths_one_line_store_unchanged() -> None:
    """200 mutations (truncations, flips, varints, lengths past the end, wrong wire types,
    nesting, huge counts, bad UTF-8, groups) of the tiny space, the bundled sample and small
    corpus files; the benchmark-style run (``python -c 'import test_xplane_hostile as t;
    print(t.fuzz(SEED, N))'``) does thousands."""
    result = fuzz(17, 200)
    assert result["problems"] == [], result["problems"][:10]
    assert result["refused"] > 50 and result["accepted"] > 10, result


def test_the_mutator_is_deterministic_and_varied() -> None:
    a = list(mutations(5, 50))
    assert a == list(mutations(5, 50))
    assert len({hashlib.sha256(x).digest() for x in a}) > 45
    assert list(mutations(6, 50)) != a


def test_corpus_files_read_the_same_after_streaming(tmp_path: Path) -> None:
    """Every corpus XPlane through both paths: the same rows (the exact counts against XProf are
    pinned in test_xplane.py)."""
    files = sorted((CORPUS / "xplane").rglob("*.xplane.pb")) if (CORPUS / "xplane").is_dir() else []
    if not files:
        pytest.skip(f"the corpus is not here ({CORPUS / 'xplane'})")
    _need_wire()
    for i, f in enumerate(files):
        stores = []
        for env in ({}, {"TRACEKIT_PURE_PYTHON": "1"}):
            s = tmp_path / f"{i}-{len(env)}.duckdb"
            assert run_cli("ingest", str(f), "--store", str(s), env=env).returncode == 0
            stores.append(_rows(s))
        assert stores[0] == stores[1], f
        assert sum(len(v) for k, v in stores[0].items() if k != "ranks") > 100, f


def test_the_space_parses_the_same_as_protobuf_whole() -> None:
    """decode_xspace's planes are protobuf's planes (names, order), with the sample."""
    _need_wire()
    whole = xr.read_xspace(JAX_SAMPLE)
    decoded = xr.decode_xspace(JAX_SAMPLE)
    try:
        assert [name for _, _, name in decoded.planes] == [p.name for p in whole.planes]
        for (offset, size, _), plane in zip(decoded.planes, whole.planes):
            assert xplane_pb2.XPlane.FromString(decoded.source.view[offset : offset + size]) == plane
        assert list(decoded.space.hostnames) == list(whole.hostnames)
    finally:
        decoded.close()
