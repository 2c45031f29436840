"""XPlane ingest on the real captures in ../shared/corpus/xplane and the project's own JAX capture.

Counts and duration sums are checked against ``jax.profiler.ProfileData`` (XLA's own C++ reader);
TPU flops and bytes against a minimal protobuf wire decoder written here, independent of the
bindings tracekit generates.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import duckdb
import pytest
from conftest import CORPUS, SAMPLES, TOOLS
from helpers import run_cli, sha256

import tracekit

XPLANE = CORPUS / "xplane"
needs_xplane_corpus = pytest.mark.skipif(
    not XPLANE.is_dir(), reason=f"XPlane corpus not found at {XPLANE} (only in the workspace and CI)"
)
CORPUS_FILES = sorted(XPLANE.glob("*/*.xplane.pb")) if XPLANE.is_dir() else []
JAX_SAMPLE = SAMPLES / "jax_cpu_decode_recompile.xplane.pb.gz"
TPU_FILE = XPLANE / "xprof_tpu_v6e_inference" / "tpu_inference_2.xplane.pb"


def _profile_data(path: Path):  # type: ignore[no-untyped-def]
    from jax.profiler import ProfileData

    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return ProfileData.from_serialized_xspace(data)


def _oracle_device_lines(path: Path) -> dict[tuple[int, str], tuple[int, float]]:
    """(device index, line name) -> (events, summed duration in ns) for op and stream lines."""
    out: dict[tuple[int, str], tuple[int, float]] = {}
    for plane in _profile_data(path).planes:
        if not plane.name.startswith(("/device:TPU:", "/device:GPU:")):
            continue
        device = int(plane.name.split(":")[2].split()[0])
        for line in plane.lines:
            if line.name in ("XLA Ops", "Async XLA Ops") or line.name.startswith("Stream #"):
                events = list(line.events)
                if events:
                    out[(device, line.name)] = (len(events), sum(e.duration_ns for e in events))
    return out


@needs_xplane_corpus
@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.parent.name + "/" + p.name)
def test_device_ops_match_xla_reader(store: Path, path: Path) -> None:
    res = tracekit.ingest([path], store=store)[0]
    assert res.format == "xplane" and res.created
    want = _oracle_device_lines(path)
    assert want, "every corpus file has device activity"
    con = duckdb.connect(str(store), read_only=True)
    got = {
        (dev, line.removeprefix("xplane:")): (n, total)
        for dev, line, n, total in con.execute(
            """SELECT device, trace_category, count(*), sum(dur_ns) FROM kernels
               GROUP BY ALL"""
        ).fetchall()
    }
    con.close()
    assert set(got) == set(want)
    for key, (n, total_ns) in want.items():
        assert got[key][0] == n, key
        # tracekit rounds each ps duration to the nearest ns, ProfileData truncates: < 1 ns apart
        assert abs(got[key][1] - total_ns) <= n, key


def _varint(b: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        c = b[i]
        i += 1
        result |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return result, i


def _fields(b: bytes) -> list[tuple[int, int | bytes]]:
    """Top-level (field number, value) pairs of one protobuf message."""
    out: list[tuple[int, int | bytes]] = []
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(b, i)
            out.append((field, v))
        elif wire == 2:
            n, i = _varint(b, i)
            out.append((field, b[i : i + n]))
            i += n
        elif wire == 1:
            out.append((field, b[i : i + 8]))
            i += 8
        elif wire == 5:
            out.append((field, b[i : i + 4]))
            i += 4
        else:
            raise ValueError(f"wire type {wire}")
    return out


def _wire_tpu_flops_bytes(path: Path) -> tuple[float, float, int]:
    """Σ flops and Σ bytes_accessed over XLA Ops events of all TPU planes, straight off the wire."""
    flops = bytes_ = 0.0
    n_events = 0
    for f, plane in _fields(path.read_bytes()):
        if f != 1:
            continue
        pf = _fields(plane)  # XPlane: name=2, lines=3, event_metadata=4 (map), stat_metadata=5 (map)
        name = next((v for k, v in pf if k == 2), b"").decode()
        if not name.startswith("/device:TPU:"):
            continue
        stat_names = {}
        for k, entry in pf:
            if k == 5:
                e = dict(_fields(entry))
                stat_names[e[1]] = dict(_fields(e[2])).get(2, b"").decode()
        costs: dict[int, dict[str, float]] = {}
        for k, entry in pf:
            if k == 4:
                e = dict(_fields(entry))
                md = _fields(e[2])
                vals = {}
                for mk, st in md:
                    if mk == 5:  # XEventMetadata.stats
                        sf = dict(_fields(st))
                        sname = stat_names.get(sf.get(1, 0), "")
                        if sname in ("flops", "bytes_accessed"):
                            raw = sf.get(4, sf.get(3))  # int64_value or uint64_value
                            vals[sname] = float(raw if isinstance(raw, int) else 0)
                costs[e[1]] = vals
        for k, line in pf:
            if k != 3:
                continue
            lf = _fields(line)
            if next((v for kk, v in lf if kk == 2), b"") != b"XLA Ops":
                continue
            for kk, ev in lf:
                if kk == 4:
                    mid = dict(_fields(ev)).get(1, 0)
                    n_events += 1
                    flops += costs.get(mid, {}).get("flops", 0.0)
                    bytes_ += costs.get(mid, {}).get("bytes_accessed", 0.0)
    return flops, bytes_, n_events


@needs_xplane_corpus
def test_tpu_flops_bytes_peaks_and_modules(store: Path) -> None:
    tracekit.ingest([TPU_FILE], store=store)
    want_flops, want_bytes, n = _wire_tpu_flops_bytes(TPU_FILE)
    assert n == 6013 and want_flops > 0 and want_bytes > 0
    con = duckdb.connect(str(store), read_only=True)
    got = con.execute(
        "SELECT count(*), sum(flops), sum(bytes_accessed) FROM kernels WHERE category = 'kernel'"
    ).fetchone()
    assert got == (n, want_flops, want_bytes)
    # arithmetic intensity per run, as an analyzer will compute it
    ai = con.execute("SELECT sum(flops) / sum(bytes_accessed) FROM kernels WHERE category = 'kernel'").fetchone()[0]
    assert ai == pytest.approx(want_flops / want_bytes)
    devices = con.execute(
        "SELECT device, vendor, device_type, peak_tflops, round(peak_hbm_gbps, 2) FROM devices ORDER BY device"
    ).fetchall()
    assert devices == [(d, "google", "TPU v6 Lite", 918.0, 1637.99) for d in range(4)]
    assert con.execute("SELECT vendor, device_name FROM runs").fetchone() == ("google", "TPU v6 Lite")
    # device clock kept beside the event's own duration
    both = con.execute(
        "SELECT count(*) FROM kernels WHERE category = 'kernel' AND device_dur_ns IS NOT NULL"
    ).fetchone()[0]
    assert both == n
    # op names are the short display names, with the HLO category and the program
    row = con.execute(
        "SELECT name, hlo_category, program_id FROM kernels WHERE category = 'kernel' ORDER BY start_ns LIMIT 1"
    ).fetchone()
    assert row == ("broadcast.2", "broadcast", "11287434908481120160")
    tiled = con.execute(
        "SELECT count(*) FROM op_costs WHERE shape_with_layout LIKE '%T(8,128)%'"
    ).fetchone()[0]
    assert tiled > 0
    hbm = con.execute("SELECT sum(hbm_read_bytes + hbm_write_bytes) FROM op_costs WHERE device = 0").fetchone()[0]
    assert hbm > 0
    # four compiles in the window, one per jitted function, and the modules with their signatures
    compiles = con.execute("SELECT function, backend FROM compiles ORDER BY start_ns").fetchall()
    assert compiles == [("convert_element_type", "jax"), ("broadcast_in_dim", "jax"), ("_psum", "jax"), ("f", "jax")]
    sig = con.execute("SELECT entry_signature FROM xla_modules WHERE function = 'broadcast_in_dim'").fetchone()[0]
    assert sig == "(f32[]) -> f32[5,1024,1024,256]"
    assert con.execute("SELECT count(*) FROM module_executions WHERE device = 0").fetchone()[0] == 105
    con.close()


@needs_xplane_corpus
def test_v100_2020_names_and_gpu_properties(store: Path) -> None:
    path = XPLANE / "tfprofiler_gpu_v100_multiworker" / "34.83.195.179_6003.xplane.pb"
    tracekit.ingest([path], store=store)
    con = duckdb.connect(str(store), read_only=True)
    cats = dict(con.execute("SELECT category, count(*) FROM kernels GROUP BY ALL").fetchall())
    assert set(cats) == {"kernel", "memcpy"} and cats["memcpy"] > 0
    assert con.execute("SELECT count(*) FROM kernels WHERE category = 'memcpy' AND bytes IS NULL").fetchone() == (0,)
    dev = con.execute(
        "SELECT vendor, compute_units, clock_mhz, round(memory_bandwidth_gbps), arch FROM devices WHERE device = 4"
    ).fetchone()
    assert dev == ("nvidia", 80, 1530.0, 898.0, "sm_70")
    # the old derived lines are kept as device spans
    spans = dict(con.execute("SELECT category, count(*) FROM host_events WHERE device IS NOT NULL GROUP BY ALL").fetchall())
    assert spans["framework_op"] == 665 * 2 and spans["step"] == 2
    grid = con.execute("SELECT grid_x, block_x, registers_per_thread FROM kernels WHERE category = 'kernel' LIMIT 1").fetchone()
    assert all(v is not None for v in grid)
    con.close()


def test_jax_cpu_sample_compiles_and_shapes(store: Path) -> None:
    """The project's own CPU capture: recompiles per prompt length, and the shapes that changed."""
    tracekit.ingest([JAX_SAMPLE], store=store)
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT vendor FROM runs").fetchone() == ("cpu",)
    per_fn = dict(con.execute("SELECT function, count(*) FROM compiles GROUP BY ALL").fetchall())
    assert per_fn["prefill"] >= 3 and per_fn["decode_step"] >= 1
    variants = con.execute(
        "SELECT count(*), count(DISTINCT entry_signature) FROM xla_modules WHERE function = 'prefill'"
    ).fetchone()
    assert variants[0] == variants[1] >= per_fn["prefill"]
    in_window = con.execute(
        "SELECT count(*) FROM xla_modules WHERE function = 'prefill' AND compiled_in_window"
    ).fetchone()[0]
    assert in_window == per_fn["prefill"]
    steps = con.execute("SELECT count(*), count(DISTINCT step_num) FROM annotations WHERE is_profiler_step").fetchone()
    assert steps[0] == steps[1] > 0
    n_ops = con.execute("SELECT count(*) FROM kernels").fetchone()[0]
    con.close()
    want = 0
    for plane in _profile_data(JAX_SAMPLE).planes:
        if plane.name == "/host:CPU":
            for line in plane.lines:
                want += sum(1 for e in line.events if any(k == "hlo_op" for k, _ in e.stats))
    assert n_ops == want > 0


@needs_xplane_corpus
def test_session_directory_with_hosts_is_one_run(store: Path, tmp_path: Path) -> None:
    session = tmp_path / "logdir" / "plugins" / "profile" / "2026_11_30_09_00_00"
    session.mkdir(parents=True)
    shutil.copy(TPU_FILE, session / "tpu-host-a.xplane.pb")
    shutil.copy(XPLANE / "tracelens_mi300x_jax" / "jax08_gemm__tw003.xplane.pb", session / "gpu-host-b.xplane.pb")
    (session / "tpu-host-a.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}'))
    res = tracekit.ingest([tmp_path / "logdir"], store=store)
    assert len(res) == 1 and res[0].format == "xplane" and res[0].n_files == 2
    con = duckdb.connect(str(store), read_only=True)
    hosts = con.execute("SELECT rank, host FROM ranks ORDER BY rank").fetchall()
    assert hosts == [(0, "tw003"), (1, "tpu-host-a")]
    per_rank = dict(con.execute("SELECT rank, count(*) FROM kernels GROUP BY ALL").fetchall())
    assert per_rank == {0: 54, 1: 6613}
    con.close()


def _xplane_bad_inputs(tmp: Path) -> dict[str, tuple[Path, str]]:
    good = gzip.decompress(JAX_SAMPLE.read_bytes())
    cases = {}
    p = tmp / "truncated.xplane.pb"
    p.write_bytes(good[: len(good) // 3])
    cases["truncated"] = (p, "not a valid XSpace protobuf")
    p = tmp / "text.xplane.pb"
    p.write_text("this is not a protobuf\n" * 10)
    cases["not_protobuf"] = (p, "not")
    p = tmp / "empty.xplane.pb"
    p.write_bytes(b"")
    cases["empty"] = (p, "empty file")
    p = tmp / "cut.xplane.pb.gz"
    p.write_bytes(JAX_SAMPLE.read_bytes()[:5000])
    cases["truncated_gz"] = (p, "truncated gzip")
    d = tmp / "empty_session" / "plugins" / "profile" / "2026_01_01_00_00_00"
    d.mkdir(parents=True)
    cases["empty_session"] = (tmp / "empty_session", "no recognizable trace file")
    return cases


@pytest.mark.parametrize("case", ["truncated", "not_protobuf", "empty", "truncated_gz", "empty_session"])
def test_bad_xplane_input(tmp_path: Path, case: str) -> None:
    store = tmp_path / "s.duckdb"
    assert run_cli("ingest", str(SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"),
                   "--store", str(store)).returncode == 0
    before = sha256(store)
    path, phrase = _xplane_bad_inputs(tmp_path)[case]
    res = run_cli("ingest", str(path), "--store", str(store))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: ") and phrase in lines[0], res.stderr
    assert sha256(store) == before


def test_protobuf_size_limit_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tracekit.parsers import _xplane_read as xplane

    monkeypatch.setattr(xplane, "PROTOBUF_LIMIT", 1000)
    with pytest.raises(tracekit.TraceInputError, match="over protobuf's 2 GiB message limit"):
        xplane.read_xspace(JAX_SAMPLE)


def test_make_jax_sample_recaptures_the_bundled_sample(tmp_path: Path) -> None:
    """The script that made the JAX sample makes a capture with the same compiles and variants."""
    import subprocess
    import sys

    out = tmp_path / "re.xplane.pb.gz"
    res = subprocess.run(
        [sys.executable, str(TOOLS / "make_jax_sample.py"), "--output", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    store = tmp_path / "s.duckdb"
    new, old = tracekit.ingest([out, JAX_SAMPLE], store=store)
    con = duckdb.connect(str(store), read_only=True)
    per_run = {
        run: (n, sigs)
        for run, n, sigs in con.execute(
            """SELECT c.run_id, count(*),
                      (SELECT list(entry_signature ORDER BY module_id) FROM xla_modules m
                        WHERE m.run_id = c.run_id AND m.compiled_in_window)
               FROM compiles c GROUP BY c.run_id"""
        ).fetchall()
    }
    con.close()
    assert per_run[new.run_id] == per_run[old.run_id]
    assert per_run[new.run_id][0] == 7  # 5 prefill shapes + 2 decode batch sizes


@needs_xplane_corpus
def test_gpu_xplane_launches_link_host_calls_to_kernels(store: Path) -> None:
    path = XPLANE / "tracelens_mi300x_jax" / "jax08_attention__tw003.xplane.pb"
    want: dict[int, str] = {}
    kernels: set[int] = set()
    for plane in _profile_data(path).planes:
        for line in plane.lines:
            for e in line.events:
                corr = dict(e.stats).get("correlation_id")
                if corr is None:
                    continue
                if plane.name.startswith("/device:GPU"):
                    kernels.add(int(corr))
                elif e.name.startswith("hip"):
                    want[int(corr)] = e.name
    tracekit.ingest([path], store=store)
    con = duckdb.connect(str(store), read_only=True)
    got = dict(con.execute("SELECT correlation_id, api_name FROM launches").fetchall())
    start = con.execute("SELECT base_time_ns FROM ranks").fetchone()[0]
    con.close()
    assert got == {c: n for c, n in want.items() if c in kernels} and len(got) == len(kernels) == 105
    env = next(p for p in _profile_data(path).planes if p.name == "Task Environment")
    assert start == dict(env.stats)["profile_start_time"]


def test_python_tracer_events_counted_or_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A capture with JAX's Python tracer on: its events are counted, or stored on request; the
    C helper that reads event ids from the wire format changes nothing."""
    import subprocess
    import sys

    out = tmp_path / "py.xplane.pb.gz"
    res = subprocess.run(
        [sys.executable, str(TOOLS / "make_jax_sample.py"), "--python-tracer", "--requests", "1",
         "--output", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    n_py = sum(
        1 for p in _profile_data(out).planes for line in p.lines for e in line.events if e.name.startswith("$")
    )
    assert n_py > 1000
    counted, stored = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    tracekit.ingest([out], store=counted)
    tracekit.ingest([out], store=stored, python_events=True)
    a = duckdb.connect(str(counted), read_only=True)
    b = duckdb.connect(str(stored), read_only=True)
    assert a.execute("SELECT n_python_events FROM ranks").fetchone() == (n_py,)
    assert a.execute("SELECT count(*) FROM host_events WHERE name LIKE '$%'").fetchone() == (0,)
    assert b.execute("SELECT count(*) FROM host_events WHERE category = 'python'").fetchone() == (n_py,)
    # everything else is the same either way
    q = "SELECT category, count(*) FROM host_events WHERE category <> 'python' GROUP BY ALL ORDER BY 1"
    assert a.execute(q).fetchall() == b.execute(q).fetchall()
    a.close()
    b.close()
    from tracekit.parsers import _xplane_read

    if _xplane_read._wire is not None:  # the same rows without the helper (protobuf's wrappers)
        wrappers = tmp_path / "c.duckdb"
        monkeypatch.setenv("TRACEKIT_PURE_PYTHON", "1")  # native.load then gives no helper
        tracekit.ingest([out], store=wrappers)
        c = duckdb.connect(str(counted), read_only=True)
        c.execute(f"ATTACH '{wrappers}' AS w (READ_ONLY)")
        for t in ("host_events", "device_activity", "rank_meta"):
            assert c.execute(f"SELECT count(*) FROM (FROM {t} EXCEPT ALL FROM w.{t})").fetchone() == (0,), t
            assert c.execute(f"SELECT count(*) FROM (FROM w.{t} EXCEPT ALL FROM {t})").fetchone() == (0,), t
        c.close()
