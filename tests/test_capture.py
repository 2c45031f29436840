"""`tracekit capture` end to end on this CPU machine: real torch and JAX processes profiled through the
injected start-up hook, a real JAX profiler server captured over gRPC, the rocprofv3 wrapper checked
with a stand-in executable, and every failure mode as a one-line error with no run stored."""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from helpers import run_cli

from tracekit.collectors.capture import COUNTER_PRESETS

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "serve_tiny_decoder.py"
STANDIN_BIN = ROOT / "tests" / "fixtures" / "bin"
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def q(store: Path, sql: str) -> list[tuple]:  # type: ignore[type-arg]
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def capture_json(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> dict:  # type: ignore[type-arg]
    r = run_cli("capture", "--json", *args, env=env, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return {**json.loads(r.stdout), "_stderr": r.stderr}


def one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_torch_serving_capture_with_load(tmp_path: Path) -> None:
    """The example server under the injected PyTorch profiler, with the load driver: ops of the
    HTTP handler threads are recorded and the window's requests land with the run."""
    store, out, port = tmp_path / "s.duckdb", tmp_path / "cap", free_port()
    res = capture_json(
        "--backend", "torch", "--duration", "1.5", "--warmup", "0.5", "--out", str(out), "--store", str(store),
        "--load", f"http://127.0.0.1:{port}", "--max-tokens", "8", "--prompt-tokens", "uniform:4:24",
        "--concurrency", "2", "--model", str(EXAMPLE.parent / "tiny-decoder" / "config.json"),
        # a bare `python` with no python on PATH: the interpreter running tracekit is used
        "--", "python", str(EXAMPLE), "--port", str(port), env={"PATH": str(tmp_path / "no-bin")},
    )
    run_id = res["run"]["run_id"]
    # where the wall time went, per phase (seconds)
    assert {"starting", "capturing", "draining", "ingesting", "analyzing"} <= set(res["timings_s"])
    assert all(v >= 0 for v in res["timings_s"].values())
    assert "USDT:" not in res["_stderr"]  # libkineto's probe lines stay out of the output
    # --model: the served model's config.json is attached to the run (examples/tiny-decoder)
    assert q(store, "SELECT run_id, model, origin, tensor_parallel FROM run_models") == [
        (run_id, "tiny-decoder", "config.json", 1)]
    assert len(res["trace_files"]) == 1 and res["trace_files"][0].endswith(".pt.trace.json.gz")
    # the trace is a real torch profile, with tracekit's capture metadata
    with gzip.open(res["trace_files"][0], "rt") as fh:
        trace = json.load(fh)
    meta = json.loads(trace["tracekit_collector"]) if isinstance(trace["tracekit_collector"], str) \
        else trace["tracekit_collector"]
    assert meta["collector"] == "tracekit capture --backend torch"
    # decode work ran on the server's request threads (not the main thread) and was recorded
    (n_linear, n_threads), = q(store, f"SELECT count(*), count(DISTINCT tid) FROM ops WHERE run_id = '{run_id}' "
                                     "AND name = 'aten::linear'")
    assert n_linear > 100 and n_threads >= 1
    main_tid = str(meta["pid"])
    assert q(store, f"SELECT count(*) FROM ops WHERE run_id = '{run_id}' AND name = 'aten::linear' "
                    f"AND tid = '{main_tid}'")[0][0] == 0
    # requests: only those that started inside the window, all complete, none inflated by the export
    n_req, = q(store, f"SELECT count(*) FROM requests WHERE run_id = '{run_id}'")[0]
    assert n_req == res["requests"]["requests"] > 5
    w0, w1 = res["window_start_ns"], res["window_end_ns"]
    rows = q(store, f"SELECT start_ns, e2e_ns, output_tokens, error FROM requests WHERE run_id = '{run_id}'")
    assert all(w0 <= s <= w1 for s, _, _, _ in rows)
    assert all(err is None and tok == 8 for _, _, tok, err in rows)
    assert max(e for _, e, _, _ in rows) < 2e9  # a request spanning the trace export would take many s
    # the serving analyzer ran and its percentile matches the stored requests
    ttft_p95, = q(store, f"SELECT value FROM metrics WHERE run_id = '{run_id}' AND name = 'ttft_p95_ms'")[0]
    expect, = q(store, f"SELECT quantile_cont(ttft_ns, 0.95) / 1e6 FROM requests WHERE run_id = '{run_id}'")[0]
    assert ttft_p95 == pytest.approx(expect, rel=1e-9)
    assert q(store, f"SELECT tags FROM runs WHERE run_id = '{run_id}'")[0][0]["capture_backend"] == "torch"
    # the capture directory is self-contained: its request log and capture record travel with it
    meta = json.loads((out / "tracekit-capture.json").read_text())
    assert meta["backend"] == "torch" and meta["load"]["requests_in_window"] == n_req
    assert meta["window_start_ns"] == w0
    other = tmp_path / "other.duckdb"
    r = run_cli("ingest", str(out), "--store", str(other), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["run_id"] == run_id
    cols = "request_id, start_ns, ttft_ns, e2e_ns, itl_ns"
    assert q(other, f"SELECT {cols} FROM requests WHERE run_id = '{run_id}' ORDER BY 1") == \
        q(store, f"SELECT {cols} FROM requests WHERE run_id = '{run_id}' ORDER BY 1")
    # a damaged request log is a one-line error naming the line, and stores nothing
    log = out / "tracekit-requests.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join([*lines[:2], '{"request_id": "x"}', *lines[2:]]) + "\n")
    third = tmp_path / "third.duckdb"
    r = run_cli("ingest", str(out), "--store", str(third))
    assert "tracekit-requests.jsonl: line 3: request_id missing or of the wrong type" in one_line_error(r)
    assert not third.exists()


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_server_profiler_endpoints_with_load(tmp_path: Path, kind: str) -> None:
    """--server vllm|sglang URL: the example server started with the server's profiler directory
    variable, driven through /start_profile and /stop_profile while the load runs."""
    port, trace_dir = free_port(), tmp_path / "server-traces"
    trace_dir.mkdir()
    (trace_dir / "old.pt.trace.json.gz").write_bytes(b"from an earlier capture")  # must be left out
    env_name = {"vllm": "VLLM_TORCH_PROFILER_DIR", "sglang": "SGLANG_TORCH_PROFILER_DIR"}[kind]
    server = subprocess.Popen([PY, str(EXAMPLE), "--port", str(port)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, env_name: str(trace_dir)})
    try:
        assert server.stdout is not None and server.stdout.readline().startswith("listening on")
        store = tmp_path / "s.duckdb"
        url = f"http://127.0.0.1:{port}"
        res = capture_json("--server", kind, url, "--trace-dir", str(trace_dir), "--duration", "1",
                           "--warmup", "0.3", "--load", url, "--max-tokens", "6", "--concurrency", "2",
                           "--out", str(tmp_path / "cap"), "--store", str(store))
    finally:
        server.terminate()
        server.wait()
    (trace,) = res["trace_files"]
    assert trace.endswith(".pt.trace.json.gz") and "old." not in trace
    run_id = res["run"]["run_id"]
    assert q(store, f"SELECT count(*) FROM ops WHERE run_id = '{run_id}' AND name = 'aten::linear'")[0][0] > 50
    n, bad = q(store, f"SELECT count(*), count(*) FILTER (output_tokens <> 6 OR error IS NOT NULL) "
                      f"FROM requests WHERE run_id = '{run_id}'")[0]
    assert n == res["requests"]["requests"] > 3 and bad == 0
    assert q(store, f"SELECT tags FROM runs WHERE run_id = '{run_id}'")[0][0]["capture_backend"] == kind


def test_server_without_profiler_dir_is_a_one_line_error(tmp_path: Path) -> None:
    port = free_port()
    server = subprocess.Popen([PY, str(EXAMPLE), "--port", str(port)], stdout=subprocess.PIPE, text=True,
                              env={k: v for k, v in os.environ.items() if not k.endswith("_TORCH_PROFILER_DIR")})
    try:
        assert server.stdout is not None and server.stdout.readline().startswith("listening on")
        store = tmp_path / "s.duckdb"
        r = run_cli("capture", "--server", "vllm", f"http://127.0.0.1:{port}", "--trace-dir", str(tmp_path),
                    "--duration", "1", "--out", str(tmp_path / "cap"), "--store", str(store))
    finally:
        server.terminate()
        server.wait()
    assert "server answered HTTP 404" in one_line_error(r) and not store.exists()


FORKING = """
import json, multiprocessing as mp, os, time, torch
CONTROL = json.loads(os.environ["TRACEKIT_CAPTURE"])["control_dir"]
def profiling():  # wait (bounded) until this process's profiler has started: no race with a busy machine
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(CONTROL, f"{os.getpid()}.started")) and time.monotonic() < deadline:
        time.sleep(0.01)
def work(k):
    profiling()
    m = torch.nn.Linear(32, 32)
    for _ in range(20):
        m(torch.randn(k + 1, 32))
if __name__ == "__main__":
    torch.randn(1)
    profiling()
    ctx = mp.get_context("fork")
    ps = [ctx.Process(target=work, args=(k,)) for k in range(2)]
    [p.start() for p in ps]; [p.join() for p in ps]
"""


def test_forked_workers_each_write_a_trace_one_run(tmp_path: Path) -> None:
    """A server that forks workers: each process re-arms the profiler and writes its own trace; the
    directory is ingested as one run."""
    script = tmp_path / "fork.py"
    script.write_text(FORKING)
    store = tmp_path / "s.duckdb"
    # the window stays open until the command exits; every process waits for its own profiler
    res = capture_json("--backend", "torch", "--duration", "300", "--out", str(tmp_path / "cap"),
                       "--store", str(store), "--no-analyze", "--", PY, str(script))
    pids = {Path(p).name.split(".")[1] for p in res["trace_files"]}
    assert len(res["trace_files"]) == 3 and len(pids) == 3  # parent + 2 forked workers
    run_id = res["run"]["run_id"]
    assert res["run"]["n_files"] == 3
    # both workers' GEMMs are there, with their own batch sizes (k + 1 rows)
    dims = {r[0] for r in q(store, f"SELECT input_dims FROM ops WHERE run_id = '{run_id}' "
                                   "AND name = 'aten::linear'")}
    assert any(d.startswith("[[1,32]") for d in dims) and any(d.startswith("[[2,32]") for d in dims)


STEPS = """
import time, torch
m = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
for i in range(20):
    with torch.no_grad():
        m(torch.randn(2, 16))
    time.sleep(0.15)
"""


def test_warmup_steps_skip_outermost_forwards(tmp_path: Path) -> None:
    """--warmup-steps 5 with the window open until exit: forwards 6..20 are captured, each with
    its two Linear layers (nested modules are not steps)."""
    script = tmp_path / "steps.py"
    script.write_text(STEPS)
    store = tmp_path / "s.duckdb"
    res = capture_json("--backend", "torch", "--warmup-steps", "5", "--out", str(tmp_path / "cap"),
                       "--store", str(store), "--no-analyze", "--", PY, str(script))
    run_id = res["run"]["run_id"]
    n, = q(store, f"SELECT count(*) FROM ops WHERE run_id = '{run_id}' AND name = 'aten::linear'")[0]
    assert n == 2 * 15


JAX_DECODE = """
import jax, jax.numpy as jnp
@jax.jit
def decode_step(x, w):
    return jnp.tanh(x @ w)
w = jnp.ones((64, 64)) * 0.01
for n in range(60):
    L = (8, 16, 24)[n % 3]      # three prompt lengths: three compiles of decode_step
    decode_step(jnp.ones((L, 64)), w).block_until_ready()
"""


def test_jax_capture_compiles_and_churn(tmp_path: Path) -> None:
    """The injected jax.profiler: an XSpace per process with XLA ops and the compiles, and the
    compile-churn finding names the function and the changing dimension."""
    script = tmp_path / "jdecode.py"
    script.write_text(JAX_DECODE)
    store = tmp_path / "s.duckdb"
    res = capture_json("--backend", "jax", "--out", str(tmp_path / "cap"), "--store", str(store), "--", PY, str(script))
    run_id = res["run"]["run_id"]
    assert res["run"]["format"] == "xplane"
    assert q(store, f"SELECT count(*) FROM kernels WHERE run_id = '{run_id}'")[0][0] > 60
    fn_compiles = q(store, f"SELECT count(*) FROM compiles WHERE run_id = '{run_id}' AND function LIKE '%decode_step%'")
    assert fn_compiles[0][0] == 3
    churn = [f["title"] + " " + f["detail"] for r in res["findings"] for f in r["findings"]
             if f["analyzer"] == "compile_churn" and "decode_step" in f["title"]]
    assert len(churn) == 1 and "3 compiles" in churn[0], churn


def test_jax_serving_capture_prefill_churn_and_buckets(tmp_path: Path) -> None:
    """The JAX decoder served with load under --backend jax: unbucketed prompts recompile
    `prefill` per length inside the window (and TTFT shows it); with --buckets at most one compile
    per bucket (16/32/64)."""
    counts = {}
    for buckets in (False, True):
        # a loaded machine serves fewer requests in a window: widen it until the unbucketed
        # server has compiled prefill at least twice inside it (the condition the test is about)
        for attempt, duration in enumerate(("3", "8", "20")):
            port, store = free_port(), tmp_path / f"s{int(buckets)}_{attempt}.duckdb"
            res = capture_json(
                "--backend", "jax", "--duration", duration, "--warmup", "0.2",
                "--out", str(tmp_path / f"cap{int(buckets)}_{attempt}"),
                "--store", str(store), "--load", f"http://127.0.0.1:{port}", "--max-tokens", "6",
                "--prompt-tokens", "uniform:4:60", "--concurrency", "2", "--",
                PY, str(EXAMPLE), "--engine", "jax", "--port", str(port), *(["--buckets"] if buckets else []))
            run_id = res["run"]["run_id"]
            counts[buckets] = q(store, f"SELECT count(*) FROM compiles WHERE run_id = '{run_id}' "
                                       "AND function = 'prefill'")[0][0]
            if res["requests"]["requests"] > 0 and (buckets or counts[buckets] >= 2):
                break
        n, bad = q(store, f"SELECT count(*), count(*) FILTER (output_tokens <> 6 OR error IS NOT NULL) "
                          f"FROM requests WHERE run_id = '{run_id}'")[0]
        assert n == res["requests"]["requests"] > 0 and bad == 0
        churn = [f for r in res["findings"] for f in r["findings"]
                 if f["analyzer"] == "compile_churn" and f["title"].startswith("prefill recompiled")]
        if not buckets:
            assert len(churn) == 1 and "dimension 1" in churn[0]["detail"], churn
            # two request threads compile at once: the share counts wall time (the union), not Σ
            spans = sorted(q(store, f"SELECT start_ns, start_ns + dur_ns FROM compiles WHERE run_id = '{run_id}' "
                                    "AND function = 'prefill'"))
            union, end = 0, None
            for s0, e0 in spans:
                if end is None or s0 > end:
                    union += e0 - s0
                    end = e0
                elif e0 > end:
                    union += e0 - end
                    end = e0
            ev = churn[0]["evidence"]
            assert ev["compile_wall_ns"] == union <= ev["window_ns"]
            assert ev["compile_time_ns"] == sum(e0 - s0 for s0, e0 in spans)
    # prompt lengths are random: unbucketed, each new length in the window compiles; bucketed,
    # never more than the three buckets whatever the lengths
    assert counts[False] >= 2 and counts[True] <= 3, counts


JAX_SERVER = """
import sys, time, jax, jax.numpy as jnp
jax.profiler.start_server(int(sys.argv[1]))
@jax.jit
def f(x):
    return jnp.tanh(x @ x)
x = jnp.ones((64, 64)) * 0.01
print("ready", flush=True)
t0 = time.time()
while time.time() - t0 < 60:
    x = f(x).block_until_ready()
"""


def test_attach_to_a_jax_profiler_server(tmp_path: Path) -> None:
    """--attach HOST:PORT: a real jax.profiler server captured over gRPC (ProfilerService.Profile)."""
    script = tmp_path / "jserver.py"
    script.write_text(JAX_SERVER)
    port = free_port()
    proc = subprocess.Popen([PY, str(script), str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        store = tmp_path / "s.duckdb"
        res = capture_json("--attach", f"127.0.0.1:{port}", "--duration", "1", "--out", str(tmp_path / "cap"),
                           "--store", str(store), "--no-analyze")
    finally:
        proc.kill()
        proc.wait()
    (path,) = res["trace_files"]
    assert path.endswith(".xplane.pb") and "/plugins/profile/" in path
    run_id = res["run"]["run_id"]
    n, names = q(store, f"SELECT count(*), list(DISTINCT name) FROM kernels WHERE run_id = '{run_id}'")[0]
    assert n > 100 and any("tanh" in x for x in names)


def test_rocprof_wrapper_with_standin(tmp_path: Path) -> None:
    """--backend rocprof: the rocprofv3 command line (inference defaults, %pid% in the output name,
    one-pass counters) and the ingest of what it wrote."""
    log = tmp_path / "rocprof.log"
    env = {"PATH": f"{STANDIN_BIN}{os.pathsep}{os.environ['PATH']}", "ROCPROF_STANDIN_LOG": str(log)}
    store, out = tmp_path / "s.duckdb", tmp_path / "cap"
    res = capture_json("--backend", "rocprof", "--counters", "stalls", "--duration", "0.5", "--warmup", "0.25",
                       "--out", str(out), "--store", str(store), "--no-analyze", "--",
                       PY, "-c", "import time; time.sleep(60)", env=env)
    (call,) = [json.loads(x) for x in log.read_text().splitlines()]
    argv = call["argv"]
    for flag in ("--kernel-trace", "--memory-copy-trace", "--hip-runtime-trace", "--marker-trace"):
        assert flag in argv
    assert argv[argv.index("-o") + 1] == "%hostname%/%pid%" and argv[argv.index("-d") + 1] == str(out)
    pmc = argv[argv.index("--pmc") + 1: argv.index("--collection-period")]
    assert pmc == COUNTER_PRESETS["stalls"][0]
    assert argv[argv.index("--collection-period") + 1] == "250:500:1"
    # rocpd and CSV were both written; the run is read once, from rocpd, with the sample's numbers
    expected = json.loads((ROOT / "sample_traces" / "amd_synthetic_expected.json").read_text())
    run_id = res["run"]["run_id"]
    assert res["run"]["format"] == "rocpd"
    n_kernels, = q(store, f"SELECT count(*) FROM kernels WHERE run_id = '{run_id}' AND category = 'kernel'")[0]
    assert n_kernels == expected["kernel_dispatches"]


def test_rocprof_multipass_preset_uses_an_input_file(tmp_path: Path) -> None:
    log = tmp_path / "rocprof.log"
    env = {"PATH": f"{STANDIN_BIN}{os.pathsep}{os.environ['PATH']}", "ROCPROF_STANDIN_LOG": str(log)}
    capture_json("--backend", "rocprof", "--counters", "memory", "--out", str(tmp_path / "c"),
                 "--store", str(tmp_path / "s.duckdb"), "--no-analyze", "--", PY, "-c", "import time; time.sleep(0.5)",
                 env=env)
    (call,) = [json.loads(x) for x in log.read_text().splitlines()]
    assert "-i" in call["argv"] and "--pmc" not in call["argv"]
    assert call["jobs"] == COUNTER_PRESETS["memory"]
    assert not list((tmp_path / "c").glob("tracekit-counters-*.json"))  # input file not left behind


def test_nsys_wrapper_with_standin(tmp_path: Path) -> None:
    """--backend nsys: the nsys profile command line (CUDA + NVTX, graphs node by node, SQLite
    export beside the report, the window as --delay/--duration) and the ingest of the export."""
    log = tmp_path / "nsys.log"
    env = {"PATH": f"{STANDIN_BIN}{os.pathsep}{os.environ['PATH']}", "NSYS_STANDIN_LOG": str(log)}
    store, out = tmp_path / "s.duckdb", tmp_path / "cap"
    res = capture_json("--backend", "nsys", "--duration", "0.5", "--warmup", "0.25", "--out", str(out),
                       "--store", str(store), "--no-analyze", "--", PY, "-c", "import time; time.sleep(60)", env=env)
    (call,) = [json.loads(x) for x in log.read_text().splitlines()]
    argv = call["argv"]
    assert argv[0] == "profile" and argv[-3:] == [PY, "-c", "import time; time.sleep(60)"]
    for opt in ("--trace=cuda,nvtx", "--cuda-graph-trace=node", "--export=sqlite", "--trace-fork-before-exec=true",
                "--delay=0.25", "--duration=0.5", f"--output={out / 'report-%h-%p'}"):
        assert opt in argv
    # the report and its export were written; the run is read once, from the export
    assert {Path(p).suffix for p in res["trace_files"]} == {".nsys-rep", ".sqlite"}
    run_id = res["run"]["run_id"]
    assert res["run"]["format"] == "nsys" and res["run"]["n_files"] == 1
    sample = ROOT / "sample_traces" / "nsys_synthetic_tp2_graphs.sqlite"
    con = sqlite3.connect(f"file:{sample}?mode=ro", uri=True)
    expected_kernels = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    con.close()
    n_kernels, = q(store, f"SELECT count(*) FROM kernels WHERE run_id = '{run_id}' AND category = 'kernel'")[0]
    assert n_kernels == expected_kernels


@pytest.mark.parametrize(("backend", "tool"), [("rocprof", "rocprofv3"), ("nsys", "nsys")])
def test_wrapping_profiler_missing_is_a_one_line_error(tmp_path: Path, backend: str, tool: str) -> None:
    store = tmp_path / "s.duckdb"
    r = run_cli("capture", "--backend", backend, "--duration", "1", "--out", str(tmp_path / "c"), "--store",
                str(store), "--", PY, "-c", "pass", env={"PATH": os.path.dirname(PY)})
    assert f"{tool}: not found on PATH" in one_line_error(r)
    assert not store.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "torch", "--", "no-such-command-xyz"], "no-such-command-xyz: command not found"),
        (["--backend", "torch", "--", PY, "-c", "pass"],
         ("no trace written: no Python process of the command imported torch")),
        (["--backend", "torch", "--", PY, "-c", "import sys; sys.exit(3)"], "no trace written"),
        (["--attach", "127.0.0.1:{dead}", "--duration", "1"], "profiler server unreachable"),
        (["--server", "vllm", "http://127.0.0.1:{dead}", "--duration", "1", "--trace-dir", "{tmp}"],
         "server unreachable"),
        (["--server", "vllm", "http://127.0.0.1:{dead}", "--duration", "1", "--trace-dir", "{tmp}/nope"],
         "trace directory does not exist"),
        (["--backend", "torch", "--load", "http://127.0.0.1:{dead}", "--duration", "1", "--ready-timeout", "1",
          "--", PY, "-c", "import signal, time; signal.signal(signal.SIGINT, signal.SIG_DFL); time.sleep(30)"],
         "server unreachable: no connection within 1 s"),
        (["--backend", "jax", "--warmup-steps", "3", "--", PY, "-c", "pass"], "--warmup-steps"),
        (["--backend", "torch", "--counters", "stalls", "--", PY, "-c", "pass"], "--counters"),
        (["--duration", "1"], "give exactly one of"),
        # a bad load spec fails before the command starts
        (["--backend", "torch", "--load", "http://127.0.0.1:{dead}", "--prompt-tokens", "bogus:1", "--duration", "1",
          "--", PY, "-c", "import time; time.sleep(30)"], "bogus:1: bad length distribution"),
        # a window that never opens (the command never imports torch) is bounded by --ready-timeout
        (["--backend", "torch", "--duration", "30", "--ready-timeout", "2", "--",
          PY, "-c", "import signal, time; signal.signal(signal.SIGINT, signal.SIG_DFL); time.sleep(60)"],
         "no Python process of the command imported torch within 2 s"),
        (["--backend", "rocprof", "--counters", "memory", "--duration", "5", "--", PY, "-c", "pass"],
         "preset 'memory' needs 2 passes"),
    ],
)
def test_failures_are_one_line_errors_and_store_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    dead = free_port()
    args = [a.format(dead=dead, tmp=tmp_path) for a in args]
    store = tmp_path / "s.duckdb"
    r = run_cli("capture", "--out", str(tmp_path / "cap"), "--store", str(store), *args, timeout=120)
    assert message in one_line_error(r)
    assert not store.exists()


FOREVER = """
import sys, time, torch
m = torch.nn.Linear(8, 8)
for i in range(10**9):
    m(torch.randn(1, 8)); time.sleep(0.01)
    if i == 50:
        open(sys.argv[1], "w").close()  # running for a while, profiler armed since the import
"""


def test_ctrl_c_closes_the_window_and_still_ingests(tmp_path: Path) -> None:
    script = tmp_path / "forever.py"
    script.write_text(FOREVER)
    store = tmp_path / "s.duckdb"
    env = dict(os.environ)
    env.pop("TRACEKIT_STORE", None)
    proc = subprocess.Popen([PY, "-c", "from tracekit.cli.main import main; main()", "capture", "--json",
                             "--backend", "torch", "--out", str(tmp_path / "cap"), "--store", str(store),
                             "--no-analyze", "--", PY, str(script), str(tmp_path / "running")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 90
    while not (tmp_path / "running").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    res = json.loads(stdout)
    assert res["interrupted"] is True and "SIGINT: closing the capture window" in stderr
    run_id = res["run"]["run_id"]
    assert q(store, f"SELECT count(*) FROM ops WHERE run_id = '{run_id}' AND name = 'aten::linear'")[0][0] > 10
