"""Bad input: one line 'error: <path>: <reason>' on stderr, exit code 2, store untouched."""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

import duckdb
import pytest
from conftest import SAMPLES
from helpers import run_cli, sha256

SAMPLE = SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"


def _bad_inputs(tmp: Path) -> dict[str, tuple[Path, str]]:
    """name -> (path, a phrase the error line must contain)."""
    gz = SAMPLE.read_bytes()
    plain = gzip.decompress(gz)
    cases: dict[str, tuple[Path, str]] = {}

    def put(name: str, data: bytes, phrase: str) -> None:
        p = tmp / name
        p.write_bytes(data)
        cases[name] = (p, phrase)

    put("truncated.json.gz", gz[: len(gz) // 2], "truncated gzip")
    put("truncated.json", plain[: len(plain) // 2], "truncated or malformed JSON")
    put("cut_in_header.json", plain[:40], "no traceEvents")
    put("not_a_trace.json", json.dumps({"model": "llama", "batch": 8}).encode(), "no traceEvents")
    put("empty.json", b"", "empty file")
    put("blank.json", b"   \n\n", "empty file")
    put("corrupt.json.gz", gz[:20] + bytes(200) + gz[220:], "corrupt gzip")
    put("garbage.json", b"\x00\x01binary garbage", "not a JSON trace")
    bad_event = re.sub(rb'"traceEvents"\s*:\s*\[', b'"traceEvents": [{"ph": "X", "ts": "soon"},', plain, count=1)
    assert bad_event != plain
    put("bad_event.json", bad_event, "unexpected value in an event")
    empty_dir = tmp / "nothing_here"
    empty_dir.mkdir()
    (empty_dir / "notes.txt").write_text("no traces")
    cases["nothing_here"] = (empty_dir, "no recognizable trace file")
    cases["missing.json"] = (tmp / "missing.json", "no such file or directory")
    link = tmp / "dangling.json"
    link.symlink_to(tmp / "gone.json")
    cases["dangling.json"] = (link, "no such file or directory")
    return cases


@pytest.fixture
def populated_store(tmp_path: Path) -> Path:
    store = tmp_path / "store.duckdb"
    res = run_cli("ingest", str(SAMPLE), "--store", str(store))
    assert res.returncode == 0, res.stderr
    return store


@pytest.mark.parametrize(
    "case",
    ["truncated.json.gz", "truncated.json", "cut_in_header.json", "not_a_trace.json", "empty.json",
     "blank.json", "corrupt.json.gz", "garbage.json", "bad_event.json", "nothing_here", "missing.json",
     "dangling.json"],
)
def test_bad_input_one_line_exit_2_store_untouched(tmp_path: Path, populated_store: Path, case: str) -> None:
    path, phrase = _bad_inputs(tmp_path)[case]
    before = sha256(populated_store)
    res = run_cli("ingest", str(path), "--store", str(populated_store))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"error: {path}: "), lines[0]
    assert phrase in lines[0]
    assert "Traceback" not in res.stderr
    assert sha256(populated_store) == before
    assert not Path(str(populated_store) + ".wal").exists()


def test_failed_first_ingest_creates_no_store(tmp_path: Path) -> None:
    path, _ = _bad_inputs(tmp_path)["truncated.json"]
    store = tmp_path / "new.duckdb"
    res = run_cli("ingest", str(path), "--store", str(store))
    assert res.returncode == 2
    assert not store.exists() and not Path(str(store) + ".wal").exists()


def test_one_bad_path_among_good_ones_ingests_nothing(tmp_path: Path, populated_store: Path) -> None:
    """All PATHs of one command are one transaction: the good run before the bad one is not kept."""
    other = tmp_path / "copy_of_sample.json"
    other.write_bytes(gzip.decompress(SAMPLE.read_bytes()))  # same events, different bytes: a new run
    bad, _ = _bad_inputs(tmp_path)["truncated.json"]
    res = run_cli("ingest", str(other), str(bad), "--store", str(populated_store))
    assert res.returncode == 2
    con = duckdb.connect(str(populated_store), read_only=True)
    assert con.execute("SELECT count(*) FROM runs").fetchone() == (1,)
    assert con.execute("SELECT count(DISTINCT run_id) FROM ops").fetchone() == (1,)
    con.close()


def test_unknown_format_and_bad_tag_are_usage_errors(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    res = run_cli("ingest", str(SAMPLE), "--store", str(store), "--format", "nope")
    assert res.returncode == 2 and "unknown format 'nope'" in res.stderr
    res = run_cli("ingest", str(SAMPLE), "--store", str(store), "--tag", "novalue")
    assert res.returncode == 2 and res.stderr.startswith("error: --tag novalue: expected KEY=VALUE")
    assert not store.exists()


def test_not_a_store_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE t (x INTEGER)")
    con.close()
    before = sha256(other)
    res = run_cli("ingest", str(SAMPLE), "--store", str(other))
    assert res.returncode == 2
    assert "not a tracekit store" in res.stderr
    assert sha256(other) == before
    text = tmp_path / "text.duckdb"
    text.write_text("hello")
    res = run_cli("runs", "--store", str(text))
    assert res.returncode == 2 and res.stderr.startswith(f"error: {text}: ")
    assert os.path.getsize(text) == 5
