"""XProf for TPU depth (tracekit[xprof]): tracekit's per-op TPU times, FLOPs and bytes against
XProf's own ``hlo_stats`` converter on the corpus TPU capture, and ``tracekit open RUN --xprof``
end to end (a real XProf server on 127.0.0.1, stopped by the test)."""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import CORPUS
from helpers import run_cli

import tracekit
from tracekit.xprof import has_xprof

ROOT = Path(__file__).resolve().parent.parent
TPU = CORPUS / "xplane" / "xprof_tpu_v6e_inference" / "tpu_inference_2.xplane.pb"
JAX = ROOT / "sample_traces" / "jax_cpu_decode_recompile.xplane.pb.gz"
needs_xprof = pytest.mark.skipif(not has_xprof(), reason="XProf is not installed (pip install 'tracekit[xprof]')")


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=120) as r:
        body = r.read()
    return json.loads(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)


@needs_xprof
@pytest.mark.skipif(not TPU.is_file(), reason=f"TPU corpus capture not found at {TPU} (only in the project's "
                                                "workspace and CI)")
def test_per_op_times_flops_and_bytes_equal_xprof_hlo_stats(tmp_path: Path) -> None:
    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data([str(TPU)], "hlo_stats", {"use_saved_result": False})
    table = json.loads(data)
    cols = [c["label"] for c in table["cols"]]
    xprof = {(r["Program id"], r["HLO op name"]): r for r in
             (dict(zip(cols, [c.get("v") for c in row["c"]])) for row in table["rows"])}
    store = tmp_path / "tpu.duckdb"
    (run,) = tracekit.ingest([TPU], store=store)
    with duckdb.connect(str(store), read_only=True) as con:
        ours = {(p, n): (c, t, f, b, h) for p, n, c, t, f, b, h in con.execute("""
            SELECT program_id, name, count(*), sum(device_dur_ns), sum(model_flops), sum(bytes_accessed),
                   sum(hbm_bytes)
            FROM kernels WHERE run_id = ? AND category <> 'xla_async' AND device_dur_ns IS NOT NULL
            GROUP BY ALL""", [run.run_id]).fetchall()}
    assert set(ours) == set(xprof) and len(ours) == 17
    for key, x in xprof.items():
        n, time_ns, flops, nbytes, hbm = ours[key]
        seconds = x["Total time (us)"] / 1e6
        assert n == x["#Occurrences"], key
        # XProf sums picoseconds; tracekit stores each op's duration rounded to the ns: they agree
        # to the nanosecond per occurrence
        assert abs(time_ns - x["Total time (us)"] * 1e3) <= 0.5 * n, key
        assert flops == pytest.approx(x["Model GFLOP/s"] * 1e9 * seconds, rel=1e-9, abs=1e-3), key
        assert nbytes == pytest.approx(x["Measured memory BW (GiB/s)"] * 2**30 * seconds, rel=1e-9), key
        if hbm is not None:  # an op without a memory breakdown has no HBM bytes in tracekit
            assert hbm == pytest.approx(x["HBM BW (GiB/s)"] * 2**30 * seconds, rel=1e-9), key


def _non_loopback_addresses() -> list[str]:
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
    except socket.gaierror:
        return []
    return sorted({i[4][0] for i in infos if not str(i[4][0]).startswith("127.")})


@needs_xprof
def test_open_xprof_serves_the_run_on_loopback_until_stopped(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    (run,) = tracekit.ingest([JAX], store=store)
    proc = subprocess.Popen([sys.executable, "-c", "from tracekit.cli.main import main; main()", "open",
                             run.run_id[:8], "--xprof", "--store", str(store)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={k: v for k, v in os.environ.items() if k != "TRACEKIT_STORE"})
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith(f"/?run={run.run_id}"), url
        root = url.split("?")[0]
        port = int(root.rsplit(":", 1)[1].strip("/"))
        assert _get(root + "data/plugin/profile/runs") == [run.run_id]
        tools = _get(root + f"data/plugin/profile/run_tools?run={run.run_id}")
        assert "trace_viewer@" in tools and "hlo_stats" in tools
        for addr in _non_loopback_addresses():  # bound to 127.0.0.1 only
            with socket.socket() as s, pytest.raises(OSError):
                s.settimeout(2)
                s.connect((addr, port))
        logdir = Path(next(line for line in proc.stderr if "serving" in line).split("serving ")[1].split(")")[0])
        assert (logdir / "plugins" / "profile" / run.run_id).is_dir()  # the .gz decompressed there
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
    assert rc == 0
    with socket.socket() as s, pytest.raises(OSError):
        s.settimeout(2)
        s.connect(("127.0.0.1", port))
    assert not logdir.exists()  # the log directory tracekit made is removed


def test_open_refuses_in_one_line(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    (nsys,) = tracekit.ingest([ROOT / "sample_traces" / "nsys_synthetic_tp2_graphs.sqlite"], store=store)
    (jax,) = tracekit.ingest([JAX], store=store)
    r = run_cli("open", nsys.run_id, "--xprof", "--store", str(store))
    if has_xprof():
        assert r.returncode == 2 and r.stderr == f"error: {nsys.run_id}: XProf opens XPlane runs; this run is nsys\n"
    r = run_cli("open", jax.run_id, "--store", str(store))
    assert r.returncode == 2 and "--xprof" in r.stderr and r.stderr.count("\n") == 1
    # without the extra: the install line (xprof hidden from this process)
    r = subprocess.run([sys.executable, "-c", ("import sys; sys.modules['xprof'] = None; "
                        "from tracekit.cli.main import main; main()"), "open", jax.run_id, "--xprof", "--store",
                        str(store)], capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "pip install 'tracekit[xprof]'" in r.stderr and r.stderr.count("\n") == 1, r.stderr
