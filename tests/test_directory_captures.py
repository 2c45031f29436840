"""A directory is one run only when its files are one capture (issue 16, item 7): separate
captures side by side (recorded hours apart on one host) are refused in one line that says how
to split them, ranks of one capture (overlapping in time) stay one run, and a run whose ranks ran
on different device models says so. Inputs: the bundled rocprofv3 CSV capture, copied under
other prefixes (a second process; a second capture an hour later, its timestamps shifted)."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import duckdb
import pytest
from conftest import CORPUS, SAMPLES, needs_shared
from helpers import run_cli, sha256

import tracekit
from tracekit.errors import TraceInputError

CSV = SAMPLES / "amd_synthetic_csv"
HOUR_NS = 3_600_000_000_000


def _copy(dst: Path, prefix: str, shift_ns: int = 0, device: str | None = None) -> None:
    """The sample capture's files as ``<prefix>_<what>.csv``, timestamps moved by ``shift_ns``
    and the GPU agent renamed to ``device`` when given."""
    dst.mkdir(parents=True, exist_ok=True)
    for src in CSV.glob("27182_*.csv"):
        with src.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
            fields = list(rows[0]) if rows else []
        for r in rows:
            for k in fields:
                if k.endswith("_Timestamp") and r[k]:
                    r[k] = str(int(r[k]) + shift_ns)
            if device and r.get("Agent_Type") == "GPU":
                r["Product_Name"] = device
        out = dst / src.name.replace("27182_", f"{prefix}_")
        with out.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)


def test_separate_captures_in_one_directory_are_refused(tmp_path: Path) -> None:
    d = tmp_path / "two"
    _copy(d, "decode")
    _copy(d, "prefill", shift_ns=HOUR_NS)
    store = tmp_path / "s.duckdb"
    tracekit.ingest([SAMPLES / "amd_synthetic_rocpd"], store)
    before = sha256(store)
    r = run_cli("ingest", str(d), "--store", str(store))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"error: {d}: holds 2 separate captures, recorded up to ")
    assert "decode_" in r.stderr and "prefill_" in r.stderr and "--one-run" in r.stderr
    assert sha256(store) == before  # untouched
    # one capture per PATH: two runs
    for prefix in ("decode", "prefill"):
        (d / prefix).mkdir()
        for f in d.glob(f"{prefix}_*.csv"):
            shutil.move(f, d / prefix / f.name)
    runs = tracekit.ingest([d / "decode", d / "prefill"], store)
    assert len({x.run_id for x in runs}) == 2
    # --one-run: the user says it is one capture
    _copy(tmp_path / "again", "decode")
    _copy(tmp_path / "again", "prefill", shift_ns=HOUR_NS)
    r = run_cli("ingest", str(tmp_path / "again"), "--store", str(store), "--one-run", "--json")
    assert r.returncode == 0, r.stderr


def test_ranks_of_one_capture_stay_one_run_and_mixed_devices_are_said(tmp_path: Path) -> None:
    d = tmp_path / "one"
    _copy(d, "27182")
    _copy(d, "27183", shift_ns=1_000_000)  # a second process 1 ms later: the same capture
    store = tmp_path / "s.duckdb"
    [res] = tracekit.ingest([d], store)
    con = duckdb.connect(str(store), read_only=True)
    n_ranks = con.execute("SELECT n_ranks FROM runs WHERE run_id = ?", [res.run_id]).fetchall()[0][0]
    con.close()
    assert n_ranks >= 2 and res.warnings == []
    m = tmp_path / "mixed"
    _copy(m, "27182")
    _copy(m, "27183", shift_ns=1_000_000, device="AMD Instinct MI250X")
    r = run_cli("ingest", str(m), "--store", str(tmp_path / "m.duckdb"))
    assert r.returncode == 0, r.stderr
    warning = next(x for x in r.stderr.splitlines() if x.startswith(f"warning: {m}: one run mixes devices: "))
    assert "AMD Instinct MI250X" in warning and "AMD Instinct MI300X" in warning


@needs_shared
def test_the_llamacpp_folder_is_two_captures(tmp_path: Path) -> None:
    """The real case: llama.cpp's decode_* and prefill_* rocprofv3 CSVs, recorded 69.9 h apart."""
    folder = CORPUS / "rocprof" / "rocprofv3-llamacpp-gfx1151"
    with pytest.raises(TraceInputError, match=r"holds 2 separate captures, recorded up to 69\.9 h apart"):
        tracekit.ingest([folder], tmp_path / "s.duckdb")
    assert not (tmp_path / "s.duckdb").exists()  # a new store is not left behind
