"""The AMD readers (rocpd, RPD, rocprofv3 JSON and CSV) under hostile input: seeded mutations give
no traceback and one-line refusals; bombs and a bad TRACEKIT_TMPDIR are refused in one line;
values physics forbids are not stored as data (partial rows, duplicates, unrepresentable times)."""

from __future__ import annotations

import csv
import errno
import gzip
import hashlib
import itertools
import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from tracekit.errors import ConfigError, TraceInputError, TracekitError
from tracekit.ingest import ingest

sys.path.insert(0, str(Path(__file__).parent))
from fuzz_amd import BASES, KINDS, fresh_dir, ingest_outcome, mutations

N_MUTATIONS = 25  # per format in CI; benchmarks run thousands


@pytest.mark.parametrize("kind", KINDS)
def test_mutations_never_crash(kind: str, tmp_path: Path) -> None:
    outcomes: dict[str, int] = {}
    for i, m in enumerate(itertools.islice(mutations(kind, 0), N_MUTATIONS)):
        d = fresh_dir(tmp_path, i)
        verdict, detail = ingest_outcome(m.build(d), d / "store.duckdb")
        assert verdict != "crash", f"{m.name}: {detail}"
        if verdict == "refused":
            assert "\n" not in detail, f"{m.name}: multi-line error {detail!r}"
            assert "ingest failed in DuckDB" not in detail, f"{m.name}: trace value blamed on the store"
        outcomes[verdict] = outcomes.get(verdict, 0) + 1
    assert sum(outcomes.values()) == N_MUTATIONS


def test_mutations_are_reproducible(tmp_path: Path) -> None:
    for kind in KINDS:
        a = next(mutations(kind, 7)).build(fresh_dir(tmp_path, 1))
        b = next(mutations(kind, 7)).build(fresh_dir(tmp_path, 2))
        if a.is_dir():
            assert sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir())
            for p in a.iterdir():
                assert p.read_bytes() == (b / p.name).read_bytes()
        else:
            assert a.read_bytes() == b.read_bytes()


# ---------------------------------------------------------------------------------------------
# rocprofv3 JSON


def test_json_deep_nesting_is_one_line(tmp_path: Path) -> None:
    p = tmp_path / "1_results.json"
    p.write_bytes(b'{"rocprofiler-sdk-tool": [{"metadata": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}]}")
    with pytest.raises(TraceInputError, match=r"nesting deeper than \d+ levels") as exc:
        ingest([p], store=tmp_path / "s.duckdb")
    assert "\n" not in str(exc.value)


def test_json_gzip_bomb_refused_by_memory_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 64 MiB budget / 4 bytes of memory per document byte = 16 MiB of JSON at most
    monkeypatch.setenv("TRACEKIT_MEMORY_LIMIT", "64MiB")
    p = tmp_path / "1_results.json.gz"
    body = b'{"rocprofiler-sdk-tool": [' + b" " * (40 << 20) + b"]}"
    p.write_bytes(gzip.compress(body, 9))
    assert p.stat().st_size < 200_000
    with pytest.raises(TraceInputError, match="TRACEKIT_MEMORY_LIMIT") as exc:
        ingest([p], store=tmp_path / "s.duckdb")
    assert "\n" not in str(exc.value)
    assert not (tmp_path / "s.duckdb").exists()


def test_json_plain_file_over_budget_refused_before_reading(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEKIT_MEMORY_LIMIT", "64MiB")
    p = tmp_path / "1_results.json"
    with p.open("wb") as f:
        f.write(b'{"rocprofiler-sdk-tool": [')
        f.truncate(17 << 20)  # sparse: 17 MiB > 16 MiB allowed
    with pytest.raises(TraceInputError, match="17,825,792 bytes.*TRACEKIT_MEMORY_LIMIT"):
        ingest([p], store=tmp_path / "s.duckdb")


def _json_with(tmp_path: Path, field: str, value: object) -> Path:
    doc = json.loads(BASES["rocprofv3_json"].read_text())
    recs = doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"]
    recs[0][field] = value
    p = tmp_path / "27182_results.json"
    p.write_text(json.dumps(doc))
    return p


@pytest.mark.parametrize("value", [2**64 - 1, -(2**63)])
def test_json_unrepresentable_timestamp_is_skipped_and_counted(tmp_path: Path, value: int) -> None:
    field = "start_timestamp" if value < 0 else "end_timestamp"
    base = ingest([BASES["rocprofv3_json"]], store=tmp_path / "a.duckdb")[0]
    res = ingest([_json_with(tmp_path, field, value)], store=tmp_path / "b.duckdb")[0]
    assert res.n_device_events == base.n_device_events - 1
    with duckdb.connect(str(tmp_path / "b.duckdb"), read_only=True) as con:
        meta = con.execute("SELECT trace_metadata FROM ranks").fetchall()[0][0]
    assert json.loads(meta)["skipped_records"]["timestamp out of range"] == 1


def test_json_huge_correlation_id_is_not_a_store_error(tmp_path: Path) -> None:
    p = _json_with(tmp_path, "correlation_id", {"internal": 2**64 - 1, "external": 2**64 - 1})
    res = ingest([p], store=tmp_path / "s.duckdb")[0]
    assert res.n_device_events > 0


# ---------------------------------------------------------------------------------------------
# RPD: .rpd.gz and TRACEKIT_TMPDIR


@pytest.fixture
def rpd_gz(tmp_path: Path) -> Path:
    p = tmp_path / "in" / "trace.rpd.gz"
    p.parent.mkdir()
    p.write_bytes(gzip.compress(BASES["rpd"].read_bytes(), mtime=0))
    return p


def test_rpd_gz_reads(rpd_gz: Path, tmp_path: Path) -> None:
    assert ingest([rpd_gz], store=tmp_path / "s.duckdb")[0].n_device_events > 0


@pytest.mark.parametrize("what", ["missing", "file"])
def test_rpd_bad_tmpdir_is_one_line(rpd_gz: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    what: str) -> None:
    bad = tmp_path / "nope"
    if what == "file":
        bad.write_text("x")
    monkeypatch.setenv("TRACEKIT_TMPDIR", str(bad))
    with pytest.raises(ConfigError, match="^TRACEKIT_TMPDIR: ") as exc:
        ingest([rpd_gz], store=tmp_path / "s.duckdb")
    assert "\n" not in str(exc.value)


def test_rpd_full_tmpdir_checked_up_front(rpd_gz: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    monkeypatch.setenv("TRACEKIT_TMPDIR", str(tmpdir))
    real = shutil.disk_usage
    monkeypatch.setattr("tracekit.limits.shutil.disk_usage",
                        lambda p: real(p)._replace(free=1000))
    with pytest.raises(ConfigError, match="TRACEKIT_TMPDIR.*65,536 needed"):
        ingest([rpd_gz], store=tmp_path / "s.duckdb")
    assert list(tmpdir.iterdir()) == []


def test_rpd_disk_full_while_decompressing(rpd_gz: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    monkeypatch.setenv("TRACEKIT_TMPDIR", str(tmpdir))

    def full(*_a: object, **_k: object) -> Iterator[bytes]:
        yield b"SQLite format 3\x00" + b"\x00" * 4080
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("tracekit.parsers.rpd.iter_decompressed", full)
    with pytest.raises(ConfigError, match="^TRACEKIT_TMPDIR: .*no space left") as exc:
        ingest([rpd_gz], store=tmp_path / "s.duckdb")
    assert "\n" not in str(exc.value)
    assert list(tmpdir.iterdir()) == []  # the partial temp file is gone


def test_rpd_gzip_bomb_refused_by_ratio(tmp_path: Path) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    p = tmp_path / "bomb.rpd.gz"
    z = gzip.compress(b"SQLite format 3\x00" + bytes(80 << 20), 9)  # 80 MiB from ~80 KB
    p.write_bytes(z)
    import os

    os.environ["TRACEKIT_TMPDIR"] = str(tmpdir)
    try:
        with pytest.raises(TraceInputError, match="TRACEKIT_MAX_INFLATE_RATIO"):
            ingest([p], store=tmp_path / "s.duckdb", format_name="rpd")
    finally:
        del os.environ["TRACEKIT_TMPDIR"]
    assert list(tmpdir.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# rocpd: NULL and overflowing values


def test_rocpd_overflowing_values_are_dropped_and_counted(tmp_path: Path) -> None:
    p = tmp_path / "27182_results.db"
    shutil.copy(BASES["rocpd"], p)
    con = sqlite3.connect(p)
    (table,) = con.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                           "AND name LIKE 'rocpd_kernel_dispatch_%'").fetchone()
    rowids = [r[0] for r in con.execute(f'SELECT rowid FROM "{table}" ORDER BY rowid LIMIT 2')]
    con.execute(f'UPDATE "{table}" SET start = ? WHERE rowid = ?', (-(2**63), rowids[0]))
    con.execute(f'UPDATE "{table}" SET grid_size_x = ? WHERE rowid = ?', (2**63 - 1, rowids[1]))
    con.commit()
    con.close()
    base = ingest([BASES["rocpd"]], store=tmp_path / "a.duckdb")[0]
    res = ingest([p], store=tmp_path / "b.duckdb")[0]
    assert res.n_device_events == base.n_device_events - 1
    with duckdb.connect(str(tmp_path / "b.duckdb"), read_only=True) as c:
        meta = json.loads(c.execute("SELECT trace_metadata FROM ranks").fetchall()[0][0])
    assert meta["counts"]["bad_timestamps"] == 1


# ---------------------------------------------------------------------------------------------
# rocprofv3 CSV: truncation, duplicates, bad numbers


def _csv_copy(tmp_path: Path) -> Path:
    d = tmp_path / "csv"
    shutil.copytree(BASES["rocprofv3_csv"], d)
    return d


def _kernel_rows(store: Path) -> list[tuple[object, ...]]:
    with duckdb.connect(str(store), read_only=True) as con:
        return con.execute("SELECT name, start_ns, dur_ns FROM device_activity "
                           "WHERE category = 'kernel' ORDER BY start_ns").fetchall()


def _counts(store: Path) -> dict[str, int]:
    with duckdb.connect(str(store), read_only=True) as con:
        return dict(json.loads(con.execute("SELECT trace_metadata FROM ranks").fetchall()[0][0])["counts"])


def _copy_rows(store: Path) -> list[tuple[object, ...]]:
    with duckdb.connect(str(store), read_only=True) as con:
        return con.execute("SELECT name, start_ns, dur_ns FROM device_activity "
                           "WHERE category = 'memcpy' ORDER BY start_ns").fetchall()


def test_csv_row_cut_inside_its_last_field_is_dropped_and_counted(tmp_path: Path) -> None:
    d = _csv_copy(tmp_path)
    f = d / "27182_memory_copy_trace.csv"  # last column: End_Timestamp
    data = f.read_bytes()
    assert data.endswith(b"\n")
    f.write_bytes(data[:-4])  # the newline and 3 digits of the last End_Timestamp
    ingest([BASES["rocprofv3_csv"]], store=tmp_path / "a.duckdb")
    ingest([d], store=tmp_path / "b.duckdb")
    full, cut = _copy_rows(tmp_path / "a.duckdb"), _copy_rows(tmp_path / "b.duckdb")
    assert len(cut) == len(full) - 1
    assert set(cut) <= set(full)  # no row with a cut (wrong) value
    assert _counts(tmp_path / "b.duckdb")["partial_rows_dropped"] == 1


def test_csv_row_missing_fields_is_refused_in_one_line(tmp_path: Path) -> None:
    d = _csv_copy(tmp_path)
    f = d / "27182_kernel_trace.csv"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) - 8])  # two fields short
    with pytest.raises(TraceInputError, match="malformed CSV at line .*truncated") as exc:
        ingest([d], store=tmp_path / "s.duckdb")
    assert "\n" not in str(exc.value)


def test_csv_cut_right_after_a_row_keeps_every_row(tmp_path: Path) -> None:
    d = _csv_copy(tmp_path)
    f = d / "27182_kernel_trace.csv"
    lines = f.read_bytes().splitlines(keepends=True)
    f.write_bytes(b"".join(lines[:5]))
    ingest([d], store=tmp_path / "b.duckdb")
    assert len(_kernel_rows(tmp_path / "b.duckdb")) == 4
    assert _counts(tmp_path / "b.duckdb")["partial_rows_dropped"] == 0


def test_csv_exact_duplicates_are_stored_once_and_counted(tmp_path: Path) -> None:
    d = _csv_copy(tmp_path)
    for name in ("27182_kernel_trace.csv", "27182_counter_collection.csv"):
        f = d / name
        lines = f.read_bytes().splitlines(keepends=True)
        f.write_bytes(b"".join(lines + lines[1:4]))
    ingest([BASES["rocprofv3_csv"]], store=tmp_path / "a.duckdb")
    ingest([d], store=tmp_path / "b.duckdb")
    assert _kernel_rows(tmp_path / "a.duckdb") == _kernel_rows(tmp_path / "b.duckdb")
    with duckdb.connect(str(tmp_path / "a.duckdb"), read_only=True) as a, \
            duckdb.connect(str(tmp_path / "b.duckdb"), read_only=True) as b:
        q = "SELECT dispatch_id, counter, value FROM counter_values ORDER BY ALL"
        assert a.execute(q).fetchall() == b.execute(q).fetchall()
    assert _counts(tmp_path / "b.duckdb")["duplicate_rows_dropped"] == 6


@pytest.mark.parametrize("value", ["18446744073709551615", "-9223372036854775809", "1e30"])
def test_csv_unrepresentable_end_is_refused_in_one_line(tmp_path: Path, value: str) -> None:
    d = _csv_copy(tmp_path)
    f = d / "27182_kernel_trace.csv"
    rows = list(csv.reader(f.read_text().splitlines()))
    j = [h.lower() for h in rows[0]].index("end_timestamp")
    rows[1][j] = value
    f.write_text("\n".join(",".join(r) for r in rows) + "\n")
    with pytest.raises(TraceInputError, match="kernel_trace CSV") as exc:
        ingest([d], store=tmp_path / "s.duckdb")
    assert "\n" not in str(exc.value)


# ---------------------------------------------------------------------------------------------
# The CLI: refusals are exit 2, one line, store unchanged


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _ENTRY, *args], check=False, capture_output=True, text=True,
                          timeout=300)


#: the ``tracekit`` console script
_ENTRY = "from tracekit.cli import entry; entry()"


@pytest.mark.parametrize("kind", KINDS)
def test_cli_refusals_leave_the_store_unchanged(kind: str, tmp_path: Path) -> None:
    store = tmp_path / "store.duckdb"
    assert _cli("ingest", str(BASES["rocpd"]), "--store", str(store)).returncode == 0
    before = _sha(store)
    tried = 0
    for i, m in enumerate(mutations(kind, 11)):
        if tried == 3 or i > 200:
            break
        d = fresh_dir(tmp_path, i)
        p = m.build(d)
        if ingest_outcome(p, d / "probe.duckdb")[0] != "refused":
            continue
        tried += 1
        r = _cli("ingest", str(p), "--store", str(store))
        assert r.returncode == 2, (m.name, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:"), (m.name, r.stderr)
        assert _sha(store) == before, m.name
    assert tried == 3


def test_error_classes() -> None:
    assert issubclass(ConfigError, TracekitError)
