"""The torch collector end to end: a real CPU capture with ``torch_profile``, ingested into the
store, checked against what was run and against the exported JSON itself; the bundled
``sample_traces`` capture checked against the model that produced it; and the error raised
when torch is missing.

Every expected number is derived independently of tracekit: from the shapes of the tensors the
test multiplies, from the model configuration of ``tools/make_samples.py``, or by reading
the trace JSON with the standard library.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pytest
import torch
from conftest import ROOT, SAMPLES, TOOLS

import tracekit
from tracekit.collectors import torch_profile

MISSING = "torch is not installed: pip install 'tracekit[torch]'"

# Shapes of the captured toy workload.
M, K, N = 8, 64, 32  # x[M, K] @ W[K, N] via torch.mm
HIDDEN = 64  # lin1: Linear(K, HIDDEN), lin2: Linear(HIDDEN, N), both with bias -> aten::addmm
N_STEPS = 3
ANNOTATED_STEPS = (1,)  # the steps whose torch.mm runs inside record_function("decode_step")


def _ns(us: float) -> int:
    """Kineto µs float -> integer ns, the conversion the store documents."""
    return round(us * 1000)


def _load(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def _rows(store: Path, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------
# 1. A real capture


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Capture 3 steps of a tiny CPU workload; return the file, the handle facts and its JSON."""
    out = tmp_path_factory.mktemp("capture")
    torch.manual_seed(0)
    lin1 = torch.nn.Linear(K, HIDDEN)
    lin2 = torch.nn.Linear(HIDDEN, N)
    w = torch.randn(K, N)
    x = torch.randn(M, K)
    n_mm = n_decode = 0
    # with_stack=True so that python_function events exist and the event accounting below is
    # not trivially satisfied by zeros.
    with torch.no_grad(), torch_profile(out, activities="cpu", with_stack=True) as cap:
        assert cap.path is None  # only set once the block has exited
        for step in range(N_STEPS):
            lin2(torch.relu(lin1(x)))
            if step in ANNOTATED_STEPS:
                with torch.profiler.record_function("decode_step"):
                    torch.mm(x, w)
                n_decode += 1
            else:
                torch.mm(x, w)
            n_mm += 1
            cap.step()
    assert cap.path is not None and cap.path.is_file()
    return {
        "path": cap.path,
        "out": out,
        "started_unix_ms": cap.started_unix_ms,
        "steps": cap.steps,
        "n_mm": n_mm,
        "n_decode": n_decode,
        "trace": _load(cap.path),
    }


@pytest.fixture
def captured_store(capture: dict[str, Any], store: Path) -> tuple[Path, str]:
    (res,) = tracekit.ingest([capture["path"]], store=store)
    assert res.created
    return store, res.run_id


def test_capture_file_name_and_collector_metadata(capture: dict[str, Any]) -> None:
    path: Path = capture["path"]
    assert path.parent == capture["out"]
    m = re.fullmatch(r"([A-Za-z0-9_-]+)\.(\d+)\.(\d+)\.pt\.trace\.json\.gz", path.name)
    assert m, path.name
    assert int(m.group(2)) == os.getpid()
    assert int(m.group(3)) == capture["started_unix_ms"]
    assert capture["steps"] == N_STEPS

    trace = capture["trace"]
    meta = trace["tracekit_collector"]
    assert meta["collector"] == "tracekit.collectors.torch_profile"
    assert meta["torch_version"] == str(torch.__version__)
    assert meta["started_unix_ms"] == capture["started_unix_ms"]
    assert meta["activities"] == ["CPU"]
    with_flops = [e for e in trace["traceEvents"] if "flops" in (e.get("args") or {})]
    assert meta["flops_events"] == len(with_flops)
    # Only the matmuls get a FLOP estimate in this workload (relu/linear wrappers do not).
    assert Counter(e["name"] for e in with_flops) == {"aten::mm": N_STEPS, "aten::addmm": 2 * N_STEPS}
    assert all(e["cat"] == "cpu_op" for e in with_flops)


def test_capture_run_is_cpu_rank_0_without_kernels(
    captured_store: tuple[Path, str], capture: dict[str, Any]
) -> None:
    store, run_id = captured_store
    ((vendor, device_name, fmt, n_ranks, n_files, captured_at),) = _rows(
        store, "SELECT vendor, device_name, format, n_ranks, n_files, captured_at FROM runs"
    )
    assert (vendor, device_name, fmt, n_ranks, n_files) == ("cpu", "CPU", "kineto", 1, 1)
    # captured_at = baseTimeNanoseconds + first event; the capture started just before that.
    started = dt.datetime.fromtimestamp(capture["started_unix_ms"] / 1000, dt.UTC)
    started = started.replace(tzinfo=None)
    assert abs((captured_at - started).total_seconds()) < 60, (captured_at, started)

    assert _rows(store, "SELECT rank FROM ranks WHERE run_id = ?", [run_id]) == [(0,)]
    assert _rows(store, "SELECT count(*) FROM kernels") == [(0,)]
    assert _rows(store, "SELECT count(*) FROM devices") == [(0,)]
    assert _rows(store, "SELECT count(*) FROM runtime_calls") == [(0,)]


def test_capture_matmul_ops_have_exact_shapes_and_flops(
    captured_store: tuple[Path, str], capture: dict[str, Any]
) -> None:
    store, _ = captured_store
    mm = _rows(store, "SELECT input_dims, flops FROM ops WHERE name = 'aten::mm'")
    assert len(mm) == capture["n_mm"] == N_STEPS
    for dims, flops in mm:
        assert json.loads(dims) == [[M, K], [K, N]]
        assert flops == 2 * M * K * N == 32768

    addmm = Counter(
        (json.dumps(json.loads(d)), f)
        for d, f in _rows(store, "SELECT input_dims, flops FROM ops WHERE name = 'aten::addmm'")
    )
    assert addmm == {
        (json.dumps([[HIDDEN], [M, K], [K, HIDDEN], [], []]), 2 * M * K * HIDDEN): N_STEPS,
        (json.dumps([[N], [M, HIDDEN], [HIDDEN, N], [], []]), 2 * M * HIDDEN * N): N_STEPS,
    }

    # Timestamps and durations of the mm ops are the JSON's µs converted to ns, exactly.
    want = sorted(
        (_ns(e["ts"]), _ns(e["dur"]))
        for e in capture["trace"]["traceEvents"]
        if e.get("cat") == "cpu_op" and e.get("name") == "aten::mm"
    )
    got = sorted(_rows(store, "SELECT start_ns, dur_ns FROM ops WHERE name = 'aten::mm'"))
    assert got == want


def test_capture_annotations_and_profiler_steps(
    captured_store: tuple[Path, str], capture: dict[str, Any]
) -> None:
    store, _ = captured_store
    rows = _rows(store, "SELECT name, is_profiler_step, on_device FROM annotations")
    decode = [r for r in rows if r[0] == "decode_step"]
    assert len(decode) == capture["n_decode"] == len(ANNOTATED_STEPS)
    assert all(r[1:] == (False, False) for r in decode)
    steps = sorted(r[0] for r in rows if r[1])
    # N step() calls give ProfilerStep#0..#N: the span after the last step() is one more step.
    assert steps == sorted(f"ProfilerStep#{i}" for i in range(N_STEPS + 1))
    assert all(not r[2] for r in rows)
    assert len(rows) == len(decode) + len(steps)

    # The decode_step window holds exactly the one torch.mm issued inside it, and no addmm.
    inside = _rows(
        store,
        """SELECT o.name, count(*) FROM annotations a JOIN ops o
             ON o.start_ns >= a.start_ns AND o.end_ns <= a.end_ns
           WHERE a.name = 'decode_step' AND o.name IN ('aten::mm', 'aten::addmm') GROUP BY ALL""",
    )
    assert inside == [("aten::mm", 1)]
    # Each ProfilerStep#i (i < N) holds that step's two Linear addmm and one mm; the tail none.
    per_step = dict(
        _rows(
            store,
            """SELECT a.name, count(o.name) FROM annotations a LEFT JOIN ops o
                 ON o.start_ns >= a.start_ns AND o.end_ns <= a.end_ns
                AND o.name IN ('aten::mm', 'aten::addmm')
               WHERE a.is_profiler_step GROUP BY ALL""",
        )
    )
    assert per_step == {**{f"ProfilerStep#{i}": 3 for i in range(N_STEPS)}, f"ProfilerStep#{N_STEPS}": 0}


def test_capture_event_accounting(captured_store: tuple[Path, str], capture: dict[str, Any]) -> None:
    store, run_id = captured_store
    events = capture["trace"]["traceEvents"]
    n_python_json = sum(1 for e in events if e.get("cat") == "python_function")
    n_non_complete = sum(1 for e in events if e.get("ph") != "X")
    assert n_python_json > 0  # with_stack=True

    ((n_trace, n_python, n_flow, n_other),) = _rows(
        store,
        "SELECT n_trace_events, n_python_events, n_flow_events, n_other_skipped FROM ranks WHERE run_id = ?",
        [run_id],
    )
    ((n_host,),) = _rows(store, "SELECT count(*) FROM host_events WHERE run_id = ?", [run_id])
    ((n_kernels,),) = _rows(store, "SELECT count(*) FROM kernels WHERE run_id = ?", [run_id])
    assert n_trace == len(events)
    assert n_python == n_python_json
    assert n_flow == sum(1 for e in events if e.get("ph") in ("s", "f", "t")) == 0  # no flows on CPU
    assert n_other == n_non_complete  # the M metadata and i instant events
    assert n_host == sum(1 for e in events if e.get("ph") == "X" and e.get("cat") != "python_function")
    assert n_python + n_flow + n_other + n_host + n_kernels == n_trace
    ((run_events, run_skipped),) = _rows(store, "SELECT n_trace_events, n_skipped_events FROM runs")
    assert (run_events, run_skipped) == (n_trace, n_trace - n_host - n_kernels)

    # Host events per trace category agree with the JSON.
    want = Counter(e["cat"] for e in events if e.get("ph") == "X" and e.get("cat") != "python_function")
    got = dict(_rows(store, "SELECT trace_category, count(*) FROM host_events GROUP BY ALL"))
    assert got == dict(want)


# ---------------------------------------------------------------------------------------------
# 2. The bundled sample (config of tools/make_samples.py)

SAMPLE = SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"
BATCH, PROMPT_LEN, DECODE_STEPS = 2, 48, 16
VOCAB, D_MODEL, N_LAYERS, N_HEADS, D_FF = 512, 128, 2, 4, 384
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm")


def _model_matmul_flops(tokens: int, attended: int) -> int:
    """FLOPs of mm/addmm/bmm for one forward of ``tokens`` new tokens per sequence that attend
    to ``attended`` cached positions, counted as 2*M*K*N per matmul."""
    rows = BATCH * tokens
    dh = D_MODEL // N_HEADS
    per_layer = (
        2 * rows * D_MODEL * 3 * D_MODEL  # fused qkv (addmm)
        + 2 * rows * D_MODEL * D_MODEL  # o_proj (mm)
        + 3 * 2 * rows * D_MODEL * D_FF  # gate, up, down (mm)
        + 2 * 2 * (BATCH * N_HEADS) * tokens * dh * attended  # q@k^T and p@v (bmm)
    )
    lm_head = 2 * BATCH * D_MODEL * VOCAB  # last position only
    return N_LAYERS * per_layer + lm_head


@pytest.fixture(scope="module")
def sample_trace() -> dict[str, Any]:
    return _load(SAMPLE)


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    store = tmp_path_factory.mktemp("sample") / "store.duckdb"
    (res,) = tracekit.ingest([SAMPLE], store=store)
    return store, res.run_id


def _json_window_flops(trace: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Per non-ProfilerStep annotation: (number, flops sum) of mm/addmm/bmm cpu_ops inside it."""
    events = trace["traceEvents"]
    ops = [
        (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), int(e["args"]["flops"]))
        for e in events
        if e.get("cat") == "cpu_op" and e.get("name") in MATMULS
    ]
    out: dict[str, tuple[int, int]] = {}
    for a in events:
        if a.get("cat") != "user_annotation" or a["name"].startswith("ProfilerStep#"):
            continue
        lo, hi = _ns(a["ts"]), _ns(a["ts"]) + _ns(a["dur"])
        inside = [f for s, e, f in ops if s >= lo and e <= hi]
        out[a["name"]] = (len(inside), sum(inside))
    return out


def test_sample_annotations(sample_store: tuple[Path, str], sample_trace: dict[str, Any]) -> None:
    store, _ = sample_store
    names = Counter(n for (n,) in _rows(store, "SELECT name FROM annotations WHERE NOT is_profiler_step"))
    assert names == {"prefill": 1, **{f"decode_step_{i}": 1 for i in range(DECODE_STEPS)}}
    n_steps = _rows(store, "SELECT count(*) FROM annotations WHERE is_profiler_step")
    assert n_steps == [(DECODE_STEPS + 2,)]  # one per step() call (17) plus the tail
    want = Counter(e["name"] for e in sample_trace["traceEvents"] if e.get("cat") == "user_annotation")
    got = Counter(n for (n,) in _rows(store, "SELECT name FROM annotations"))
    assert got == want


def test_sample_counts_match_json(sample_store: tuple[Path, str], sample_trace: dict[str, Any]) -> None:
    store, run_id = sample_store
    events = sample_trace["traceEvents"]
    cpu_ops = [e for e in events if e.get("cat") == "cpu_op"]
    want = Counter(e["name"] for e in cpu_ops)
    got = dict(_rows(store, "SELECT name, count(*) FROM ops GROUP BY ALL"))
    assert got == dict(want)
    assert want["aten::mm"] > 0 and want["aten::bmm"] > 0 and want["aten::addmm"] > 0

    want_flops = Counter()
    for e in cpu_ops:
        if "flops" in e["args"]:
            want_flops[e["name"]] += e["args"]["flops"]
    got_flops = dict(
        _rows(store, "SELECT name, sum(flops)::BIGINT FROM ops WHERE flops IS NOT NULL GROUP BY ALL")
    )
    assert got_flops == dict(want_flops)
    n_with_flops = sum(1 for e in cpu_ops if "flops" in e["args"])
    assert _rows(store, "SELECT count(*) FROM ops WHERE flops IS NOT NULL") == [(n_with_flops,)]
    assert sample_trace["tracekit_collector"]["flops_events"] == n_with_flops

    ((n_trace, n_python, n_flow, n_other),) = _rows(
        store, "SELECT n_trace_events, n_python_events, n_flow_events, n_other_skipped FROM ranks"
    )
    ((n_host,),) = _rows(store, "SELECT count(*) FROM host_events WHERE run_id = ?", [run_id])
    assert n_trace == len(events)
    assert n_python + n_flow + n_other + n_host == n_trace
    assert _rows(store, "SELECT vendor, device_name FROM runs") == [("cpu", "CPU")]
    assert _rows(store, "SELECT count(*) FROM kernels") == [(0,)]


def test_sample_prefill_does_more_matmul_flops_than_any_decode_step(
    sample_store: tuple[Path, str], sample_trace: dict[str, Any]
) -> None:
    store, _ = sample_store
    got = {
        name: (int(n), int(f or 0))
        for name, n, f in _rows(
            store,
            f"""SELECT a.name, count(o.name), sum(o.flops) FROM annotations a LEFT JOIN ops o
                  ON o.start_ns >= a.start_ns AND o.end_ns <= a.end_ns
                 AND o.name IN {MATMULS}
                WHERE NOT a.is_profiler_step GROUP BY ALL""",
        )
    }
    assert got == _json_window_flops(sample_trace)

    # Independently of the trace: the model's matmul FLOPs per phase. The prefill runs 48 tokens
    # attending to 48 positions; decode step i runs 1 token attending to 48 + i + 1 positions.
    assert got["prefill"] == (15, _model_matmul_flops(PROMPT_LEN, PROMPT_LEN))
    for i in range(DECODE_STEPS):
        assert got[f"decode_step_{i}"] == (15, _model_matmul_flops(1, PROMPT_LEN + i + 1)), i
    decode_max = max(f for name, (_, f) in got.items() if name.startswith("decode_step_"))
    assert got["prefill"][1] > decode_max
    assert got["prefill"][1] == 86_769_664 and decode_max == 2_097_152


# ---------------------------------------------------------------------------------------------
# 3. make_samples.py reproduction: not tested here, the script has no output override and
#    always writes next to itself (it would overwrite the bundled sample).

# ---------------------------------------------------------------------------------------------
# 4. torch missing


def test_torch_profile_without_torch_raises(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    out = tmp_path / "never"
    with pytest.raises(RuntimeError) as info, torch_profile(out):
        pytest.fail("the block must not run without torch")  # pragma: no cover
    assert str(info.value) == MISSING
    assert isinstance(info.value.__cause__, ImportError)
    assert not out.exists()  # nothing is created before torch is found


def test_torch_profile_without_torch_installed_subprocess(tmp_path: Path) -> None:
    """In a fresh interpreter where torch cannot be found at all, importing the collector still
    works and entering it raises the install hint."""
    script = f"""
import importlib.abc, sys

class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NoTorch())
from tracekit.collectors import torch_profile  # must not need torch
assert "torch" not in sys.modules
try:
    with torch_profile({str(tmp_path / "never")!r}):
        pass
except RuntimeError as exc:
    print("RuntimeError:", exc)
else:
    print("no error")
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"RuntimeError: {MISSING}"
    assert not (tmp_path / "never").exists()


def test_make_samples_recaptures_the_bundled_sample(tmp_path: Path) -> None:
    """The script that made sample_traces/ makes a trace with the same structure again."""
    import subprocess
    import sys

    out = tmp_path / "recaptured.pt.trace.json.gz"
    res = subprocess.run(
        [sys.executable, str(TOOLS / "make_samples.py"), "--output", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert res.returncode == 0, res.stderr
    store = tmp_path / "s.duckdb"
    new, old = tracekit.ingest([out, SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"], store=store)
    assert new.run_id != old.run_id
    con = duckdb.connect(str(store), read_only=True)
    per_run = con.execute(
        """SELECT run_id, count(*) FILTER (WHERE name LIKE 'aten::%mm'), sum(flops), 
                  (SELECT count(*) FROM annotations a WHERE a.run_id = o.run_id AND a.name LIKE 'decode_step_%')
           FROM ops o GROUP BY run_id"""
    ).fetchall()
    con.close()
    stats = {r[0]: r[1:] for r in per_run}
    assert stats[new.run_id] == stats[old.run_id]
    assert stats[new.run_id][2] == 16


def test_torch_compile_sample_compiles_and_recompile(tmp_path: Path) -> None:
    """The bundled torch.compile capture: one compile and one recompile (new batch size), with ids."""
    path = SAMPLES / "cpu_torch_compile_recompile.pt.trace.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    frames = sorted((e["ts"], e["dur"]) for e in events if e.get("name") == "entire_frame_compile")
    assert len(frames) == 2
    store = tmp_path / "s.duckdb"
    tracekit.ingest([path], store=store)
    con = duckdb.connect(str(store), read_only=True)
    rows = con.execute(
        "SELECT backend, function, compile_id, dur_ns, backend_dur_ns FROM compiles ORDER BY start_ns"
    ).fetchall()
    regions = con.execute(
        "SELECT name, count(*) FROM ops WHERE name LIKE 'Torch-Compiled Region:%' GROUP BY ALL ORDER BY 1"
    ).fetchall()
    con.close()
    assert [(r[0], r[1], r[2]) for r in rows] == [("torch.compile", "frame 0", "0/0"), ("torch.compile", "frame 0", "0/1")]
    assert [r[3] for r in rows] == [round(d * 1000) for _, d in frames]
    assert all(0 < r[4] < r[3] for r in rows)  # dynamo's backend_compile nests inside each
    assert regions == [("Torch-Compiled Region: 0/0", 2), ("Torch-Compiled Region: 0/1", 2)]
