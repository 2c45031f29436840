"""Hardware catalog: every number sourced, units sane, devices of real traces identified.

Expected values are the published figures of ../shared/reference/hardware-peaks.md (and the
plane stats of the real TPU v6e capture), written out here, not read back from the catalog.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import CORPUS, KINETO, SAMPLES, needs_shared
from helpers import run_cli

import tracekit
from tracekit.analysis.hardware import (
    STANDARD_FIELDS,
    DeviceSpec,
    HardwareConfigError,
    catalog_path,
    identify,
    load_catalog,
    ridge_point,
)
from tracekit.errors import PathError
from tracekit.run_analysis import analyze_runs

XPLANE = CORPUS / "xplane"
ROCPROF = CORPUS / "rocprof"
TPU_FILE = XPLANE / "xprof_tpu_v6e_inference" / "tpu_inference_2.xplane.pb"
MI300X_XPLANE = XPLANE / "tracelens_mi300x_jax" / "jax08_gemm__tw003.xplane.pb"
MI355X_XPLANE = XPLANE / "tracelens_mi300x_jax" / "te_fused_attn__934987a2fc2f.xplane.pb"
ROCPD_FILE = ROCPROF / "rocpd-v3-sample" / "vllm_mi300x_decode_results.db"
needs_xplane = pytest.mark.skipif(
    not XPLANE.is_dir(), reason=f"XPlane corpus not found at {XPLANE} (only in the workspace and CI)"
)
needs_rocprof = pytest.mark.skipif(
    not ROCPD_FILE.is_file(), reason=f"rocpd sample not found at {ROCPD_FILE} (only in the workspace and CI)"
)

# Fields of a device table that are not values needing a source.
_UNSOURCED = {"name", "vendor", "notes", "partitionable", "match", "sources", "not_found", "not_applicable"}


@pytest.fixture(autouse=True)
def _no_user_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Keep a developer's own ~/.config/tracekit/hardware.toml or $TRACEKIT_HARDWARE out of the tests."""
    monkeypatch.delenv("TRACEKIT_HARDWARE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def _device_rows(store: Path, path: Path) -> list[dict[str, Any]]:
    tracekit.ingest([path], store=store)
    con = duckdb.connect(str(store), read_only=True)
    try:
        cur = con.execute("SELECT * FROM devices ORDER BY rank, device")
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()


def _identified(store: Path, path: Path) -> list[DeviceSpec]:
    """Specs of the devices of a trace that have a name or a CU count (XPlane lists empty planes)."""
    rows = [r for r in _device_rows(store, path) if r["compute_units"] is not None or r["device_type"]]
    assert rows, f"no devices in {path}"
    specs = [identify(r) for r in rows]
    assert all(s is not None for s in specs), [r["name"] for r, s in zip(rows, specs, strict=True) if s is None]
    return [s for s in specs if s is not None]


def _raw_catalog() -> dict[str, Any]:
    with catalog_path().open("rb") as fh:
        return tomllib.load(fh)


# ----------------------------------------------------------------------------------------------
# The catalog file itself


def _leaves(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in table.items():
        if isinstance(v, dict):
            out.update(_leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def test_every_value_has_a_source() -> None:
    raw = _raw_catalog()
    keys = set(raw["catalog"]["sources"])
    cited = re.compile("|".join(re.escape(k) for k in sorted(keys, key=len, reverse=True)) + "|https?://")
    for key, dev in raw["devices"].items():
        values = _leaves({k: v for k, v in dev.items() if k not in _UNSOURCED})
        sources = _leaves(dev.get("sources", {}))
        assert values, key
        for path, value in values.items():
            assert isinstance(value, (int, float, str)) and not isinstance(value, bool), (key, path)
            assert path in sources, f"{key}.{path} = {value!r} has no source"
        assert set(sources) <= set(values), f"{key}: sources for absent fields {set(sources) - set(values)}"
        for path, src in sources.items():
            assert cited.search(src), f"{key}.sources.{path} = {src!r} names no source key or URL"


def test_standard_fields_present_or_declared_missing() -> None:
    for key, dev in _raw_catalog()["devices"].items():
        present = set(_leaves({k: v for k, v in dev.items() if k not in _UNSOURCED}))
        missing, na = set(dev.get("not_found", [])), set(dev.get("not_applicable", []))
        assert not (missing & na) and not (present & (missing | na)), key
        assert set(STANDARD_FIELDS) <= present | missing | na, f"{key}: undeclared {set(STANDARD_FIELDS) - present - missing - na}"


def test_catalog_covers_required_devices() -> None:
    cat = load_catalog()
    want = {"tpu_v4", "tpu_v5e", "tpu_v5p", "tpu_v6e", "tpu_7x", "mi250x_gcd", "mi300x", "mi325x", "mi355x",
            "a100_sxm_80gb", "h100_sxm", "h200_sxm", "b200"}
    assert want <= set(cat)
    assert {cat[k].vendor for k in want} == {"google", "amd", "nvidia"}


@pytest.mark.parametrize(
    ("key", "gbps"),
    [("h100_sxm", 3350), ("h200_sxm", 4800), ("a100_sxm_80gb", 2039), ("b200", 7700), ("mi300x", 5300),
     ("mi325x", 6000), ("mi355x", 8000), ("mi250x_gcd", 1600), ("tpu_v4", 1200), ("tpu_v5e", 819),
     ("tpu_v5p", 2765), ("tpu_v6e", 1638), ("tpu_7x", 7380)],
)
def test_hbm_bandwidth_is_gb_per_s(key: str, gbps: float) -> None:
    """Published GB/s (1e9 B/s): not GiB/s (H100 would be 3120), not per-XCD, not per-package MI250X."""
    assert load_catalog()[key].hbm_gbps == gbps


def test_capacity_bytes_not_gb_or_gib_mixups() -> None:
    cat = load_catalog()
    gib = 2**30
    assert cat["mi300x"].hbm_bytes == 192 * gib
    assert cat["mi250x_gcd"].hbm_bytes == 64 * gib  # per GCD, not the 128 GiB package
    assert cat["tpu_v6e"].hbm_bytes == 32 * gib
    assert cat["h100_sxm"].hbm_bytes == 85_018_279_936  # what an H100 reports: 79.18 GiB
    assert cat["h200_sxm"].hbm_bytes is None and "hbm_bytes" in cat["h200_sxm"].not_found


def test_peaks_are_dense_not_sparse_or_doubled() -> None:
    cat = load_catalog()
    assert cat["h100_sxm"].peak_tflops["bf16"] == 989.4  # datasheet 1,979 is 2:4 sparse
    assert cat["h100_sxm"].peak_tflops["fp8"] == 1978.9
    assert cat["b200"].peak_tflops["bf16"] == 2250  # HGX 4.5 PF is sparse
    assert cat["mi300x"].peak_tflops["fp16"] == 1307.4  # not the doubled 2614.9
    assert cat["a100_sxm_80gb"].peak_tflops["bf16"] == 312


@pytest.mark.parametrize(("key", "flop_per_clk_cu"), [("mi300x", 2048), ("mi325x", 2048), ("mi355x", 4096),
                                                     ("mi350x", 4096), ("mi250x_gcd", 1024)])
def test_amd_peak_is_cus_times_rate_times_clock(key: str, flop_per_clk_cu: int) -> None:
    spec = load_catalog()[key]
    assert spec.compute_units is not None and spec.clock_mhz is not None
    derived = spec.compute_units * flop_per_clk_cu * spec.clock_mhz * 1e6 / 1e12
    assert spec.peak_tflops["bf16"] == pytest.approx(derived, rel=1e-3)


def test_ridge_point() -> None:
    cat = load_catalog()
    assert ridge_point(cat["h100_sxm"]) == pytest.approx(989.4e12 / 3350e9)
    assert ridge_point(cat["mi300x"], "fp8") == pytest.approx(2614.9e12 / 5300e9)
    assert ridge_point(cat["tpu_v5e"], "fp8") is None  # v5e has no FP8 peak


# ----------------------------------------------------------------------------------------------
# Identification from real traces


@needs_shared
@pytest.mark.parametrize(
    ("trace", "key", "bf16", "gbps", "cus"),
    [
        ("tracelens-h100-qwen05b-inference", "h100_sxm", 989.4, 3350, 132),
        ("tracelens-mi300x-qwen05b-inference", "mi300x", 1307.4, 5300, 304),  # "AMD Instinct MI300X VF"
        ("tracelens-b200-vllm-eager-inference-rank0of8", "b200", 2250, 7700, 148),
        ("hta-a100-train-rank0of16", "a100_sxm_80gb", 312, 2039, 108),
        ("tracelens-mi210-gpu-only", "mi210", 181.0, 1638.4, 104),
    ],
)
def test_identify_kineto(store: Path, trace: str, key: str, bf16: float, gbps: float, cus: int) -> None:
    for spec in _identified(store, KINETO / trace):
        assert (spec.key, spec.matched_by, spec.compute_units) == (key, "name", cus)
        assert spec.peak_tflops["bf16"] == bf16 and spec.hbm_gbps == gbps
        assert spec.source("hbm_gbps") not in (None, "trace")


@needs_shared
@pytest.mark.parametrize("trace", ["hta-mi250-train-tiny", "hta-v100-train-ns-resolution"])
def test_uncatalogued_kineto_devices_are_not_guessed(store: Path, trace: str) -> None:
    """'AMD Radeon Graphics' with 104 gfx90a CUs fits both an MI210 and an MI250 GCD (and not the
    110-CU MI250X GCD): ambiguous, so not identified; V100 is not catalogued."""
    rows = _device_rows(store, KINETO / trace)
    assert rows and all(identify(r) is None for r in rows)


@needs_xplane
def test_identify_tpu_v6e_prefers_trace_peaks(store: Path) -> None:
    specs = _identified(store, TPU_FILE)
    assert len(specs) == 4
    for spec in specs:
        assert spec.key == "tpu_v6e"
        assert spec.peak_tflops["bf16"] == 918 and spec.source("peak_tflops.bf16") == "trace"
        assert spec.hbm_gbps == pytest.approx(1637.99, abs=0.01) and spec.source("hbm_gbps") == "trace"
        assert spec.source("peak_tflops.int8") == "G-v6e"  # not stated by the trace: catalog
        assert ridge_point(spec) == pytest.approx(560.44, abs=0.01)  # XProf's hbm_ridge_point


@needs_xplane
def test_identify_amd_xplane_by_hardware_ignores_half_bandwidth(store: Path) -> None:
    """JAX MI300X planes say 2662.4 GB/s (HIP reports the memory-controller clock); 5300 wins."""
    specs = _identified(store, MI300X_XPLANE)
    assert {(s.key, s.matched_by, s.hbm_gbps) for s in specs} == {("mi300x", "hardware", 5300)}


@needs_xplane
def test_identify_mi355x_xplane(store: Path) -> None:
    """Compute capability 9.5, 256 CUs, 2400 MHz, 287.98 GiB: MI355X (MANIFEST says MI300-class)."""
    (spec,) = _identified(store, MI355X_XPLANE)
    assert (spec.key, spec.hbm_gbps, spec.peak_tflops["fp8"]) == ("mi355x", 8000, 5033.2)


@needs_rocprof
def test_identify_rocpd_agents(store: Path) -> None:
    rows = _device_rows(store, ROCPD_FILE)
    assert len(rows) == 8 and {(r["arch"], r["compute_units"]) for r in rows} == {("gfx942", 304)}
    for row in rows:
        spec = identify(row)
        assert spec is not None and spec.key == "mi300x" and spec.compute_scale == 1.0 and spec.hbm_scale == 1.0


@pytest.mark.parametrize("name", ["amd_synthetic_rocpd", "amd_synthetic_csv"])
def test_identify_bundled_amd_samples(store: Path, name: str) -> None:
    (spec,) = {s.key: s for s in _identified(store, SAMPLES / name)}.values()
    assert spec.key == "mi300x" and spec.peak_tflops["bf16"] == 1307.4 and spec.hbm_gbps == 5300


# ----------------------------------------------------------------------------------------------
# Identification rules on hand-written rows

_GFX942 = {"vendor": "amd", "arch": "gfx942", "compute_major": 9, "compute_minor": 4, "warp_size": 64}


def test_cpx_partition_scales_by_cus_and_xccs() -> None:
    row = {**_GFX942, "name": "AMD Instinct MI300X", "compute_units": 38, "xcc_count": 1,
           "memory_bytes": 206141652992, "clock_mhz": 2100.0}
    spec = identify(row)
    assert spec is not None and spec.key == "mi300x"
    assert spec.peak_tflops["bf16"] == pytest.approx(1307.4 / 8)
    assert spec.peak_tflops["fp8"] == pytest.approx(2614.9 / 8)
    assert spec.hbm_gbps == pytest.approx(5300 / 8)
    assert (spec.compute_units, spec.xcc_count, spec.matrix_units) == (38, 1, 152)
    assert spec.compute_scale == pytest.approx(1 / 8) and spec.hbm_scale == pytest.approx(1 / 8)
    assert "38/304 CUs (partition)" in (spec.source("peak_tflops.bf16") or "")
    assert "1/8 XCCs (partition)" in (spec.source("hbm_gbps") or "")


def test_partition_without_xcc_count_derives_it_from_cus() -> None:
    """A Kineto row (no xcc_count): DPX = 152 CUs = 4 XCDs of 38; NPS4 memory (48 GiB) still fits."""
    row = {**_GFX942, "arch": None, "name": "AMD Instinct MI300X", "compute_units": 152, "memory_bytes": 48 * 2**30}
    spec = identify(row)
    assert spec is not None and spec.xcc_count == 4
    assert spec.peak_tflops["bf16"] == pytest.approx(1307.4 / 2) and spec.hbm_gbps == pytest.approx(5300 / 2)


def test_cu_count_that_is_no_partition_is_not_identified() -> None:
    assert identify({**_GFX942, "name": "AMD Instinct MI300X", "compute_units": 100}) is None
    assert identify({**_GFX942, "name": "AMD GPU", "compute_units": 228}) is None  # MI300A-sized


def test_gfx942_memory_tells_mi300x_from_mi325x() -> None:
    base = {**_GFX942, "name": "AMD GPU (compute capability 9.4, 304 CUs)", "compute_units": 304}
    mi325 = identify({**base, "memory_bytes": 256 * 2**30 - 2**24})
    mi300 = identify({**base, "memory_bytes": 206141652992})
    assert mi325 is not None and mi300 is not None
    assert (mi325.key, mi325.hbm_gbps, mi300.key) == ("mi325x", 6000, "mi300x")
    assert identify(base) is None  # no memory stated: ambiguous, not guessed


def test_nvidia_rules() -> None:
    hopper = {"vendor": "nvidia", "arch": "sm_90", "compute_major": 9, "compute_minor": 0, "compute_units": 132}
    h100 = identify({**hopper, "name": "NVIDIA GPU (sm_90, 132 SMs)", "memory_bytes": 85018279936})
    h200 = identify({**hopper, "name": "NVIDIA H200", "memory_bytes": 150 * 10**9})
    assert h100 is not None and (h100.key, h100.matched_by) == ("h100_sxm", "hardware")
    assert h200 is not None and (h200.key, h200.hbm_gbps) == ("h200_sxm", 4800)
    assert identify({**hopper, "name": "NVIDIA H100 PCIe", "compute_units": 114}) is None
    assert identify({**hopper, "name": "NVIDIA H100 80GB HBM3", "compute_units": 16}) is None  # MIG slice
    blackwell = {"vendor": "nvidia", "arch": "sm_100", "compute_major": 10, "compute_minor": 0, "compute_units": 148}
    assert identify({**blackwell, "name": "NVIDIA GB200"}) is None  # contains "B200"; not the HGX part
    a100_40 = identify({"vendor": "nvidia", "name": "NVIDIA A100-SXM4-40GB", "compute_units": 108})
    assert a100_40 is not None and (a100_40.key, a100_40.hbm_gbps) == ("a100_sxm_40gb", 1555)
    a100_80 = identify({"vendor": "nvidia", "name": "NVIDIA A100-SXM4-80GB", "compute_units": 108})
    assert a100_80 is not None and (a100_80.key, a100_80.hbm_gbps) == ("a100_sxm_80gb", 2039)
    assert identify({"vendor": "nvidia", "name": "NVIDIA A100-PCIE-40GB", "compute_units": 108}) is None


def test_mi250x_is_per_gcd() -> None:
    gcd = {"vendor": "amd", "name": "AMD Instinct MI250X", "compute_major": 9, "compute_minor": 0,
           "compute_units": 110, "memory_bytes": 64 * 2**30 - 2**24}
    spec = identify(gcd)
    assert spec is not None and (spec.key, spec.peak_tflops["bf16"], spec.hbm_gbps) == ("mi250x_gcd", 191.5, 1600)
    assert identify({**gcd, "compute_units": 220}) is None  # the package is never one device
    # ROCm's name for both parts, 104 CUs: an MI250 GCD (its own entry), never the MI250X's peaks
    mi250 = identify({**gcd, "name": "AMD Instinct MI250X/MI250", "compute_units": 104})
    assert mi250 is not None and (mi250.key, mi250.peak_tflops["bf16"]) == ("mi250_gcd", 181.0)


def test_mi350x_clock_is_not_mi355x() -> None:
    row = {"vendor": "amd", "arch": "gfx950", "compute_units": 256, "xcc_count": 8, "warp_size": 64}
    mi355 = identify({**row, "clock_mhz": 2400.0})
    assert mi355 is not None and mi355.key == "mi355x"
    # the same die at 2200 MHz is the MI350X (its own entry), with peaks of 256 CUs at 2.2 GHz
    mi350 = identify({**row, "clock_mhz": 2200.0})
    assert mi350 is not None and mi350.key == "mi350x"
    assert mi350.peak_tflops["bf16"] == pytest.approx(256 * 4096 * 2.2e9 / 1e12, abs=0.05)
    assert mi350.peak_tflops["fp8"] == pytest.approx(256 * 8192 * 2.2e9 / 1e12, abs=0.05)
    assert (mi350.hbm_gbps, mi350.xcc_count, mi350.cus_per_xcc) == (8000, 8, 32)
    assert identify({**row, "clock_mhz": 2000.0}) is None  # neither clock: not guessed


@pytest.mark.parametrize(("kind", "key"), [("TPU v4", "tpu_v4"), ("TPU v5 lite", "tpu_v5e"), ("TPU v5", "tpu_v5p"),
                                           ("TPU v6 Lite", "tpu_v6e"), ("TPU7x", "tpu_7x")])
def test_tpu_device_type_strings(kind: str, key: str) -> None:
    spec = identify({"name": kind, "vendor": "google", "device_type": kind})
    assert spec is not None and spec.key == key and spec.matched_by == "name"
    assert identify({"name": "TPU v4 lite", "vendor": "google", "device_type": "TPU v4 lite"}) is None


def test_unknown_device_with_trace_peaks_gets_a_trace_only_spec() -> None:
    spec = identify({"name": "TPU v99", "vendor": "google", "device_type": "TPU v99",
                     "peak_tflops": 1000.0, "peak_hbm_gbps": 2000.0})
    assert spec is not None and (spec.key, spec.matched_by) == ("trace", "trace")
    assert ridge_point(spec) == pytest.approx(500.0)
    assert identify({"name": "TPU v99", "vendor": "google"}) is None


# ----------------------------------------------------------------------------------------------
# User file


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hw.toml"
    path.write_text(text)
    return path


_USER = """
[devices.h100_sxm]
price_per_hour_usd = 2.49
[devices.h100_sxm.peak_tflops]
bf16 = 800.0
[devices.h100_sxm.sources.peak_tflops]
bf16 = "our cuBLAS sweep, 2026-01"

[devices.acme_x1]
name = "Acme X1"
vendor = "other"
hbm_gbps = 2000
peak_tflops = { bf16 = 500, fp8 = 1000 }
price_per_hour_usd = 1.25
[devices.acme_x1.match]
names = ['^Acme X1$']
"""


def test_user_file_overrides_and_adds(tmp_path: Path) -> None:
    path = _write(tmp_path, _USER)
    cat = load_catalog(path)
    h100 = cat["h100_sxm"]
    assert h100.price_per_hour_usd == 2.49 and h100.source("price_per_hour_usd") == f"user config {path}"
    assert h100.peak_tflops["bf16"] == 800 and h100.source("peak_tflops.bf16") == "our cuBLAS sweep, 2026-01"
    assert h100.peak_tflops["fp8"] == 1978.9 and h100.hbm_gbps == 3350  # untouched fields stay
    acme = identify({"name": "Acme X1", "vendor": "other"}, cat)
    assert acme is not None and (acme.key, acme.price_per_hour_usd) == ("acme_x1", 1.25)
    assert ridge_point(acme, "fp8") == pytest.approx(500.0)
    assert acme.source("hbm_gbps") == f"user config {path}"


def test_user_file_from_env_and_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, _USER)
    monkeypatch.setenv("TRACEKIT_HARDWARE", str(path))
    assert "acme_x1" in load_catalog()
    monkeypatch.delenv("TRACEKIT_HARDWARE")
    assert "acme_x1" not in load_catalog()
    home_file = tmp_path / "home" / ".config" / "tracekit" / "hardware.toml"
    home_file.parent.mkdir(parents=True)
    home_file.write_text(_USER)
    assert load_catalog()["h100_sxm"].price_per_hour_usd == 2.49


def test_an_edited_user_file_is_read_again(tmp_path: Path) -> None:
    """The parsed catalog is kept between calls (the dashboard asks on every page), but never
    outlives an edit of the file it came from."""
    path = _write(tmp_path, _USER)
    assert load_catalog(path)["h100_sxm"].price_per_hour_usd == 2.49
    mine = load_catalog(path)
    mine.clear()  # a caller's dict is its own
    assert "acme_x1" in load_catalog(path)
    path.write_text(_USER.replace("2.49", "3.125"))  # another size, another modification time
    assert load_catalog(path)["h100_sxm"].price_per_hour_usd == 3.125
    assert load_catalog()["h100_sxm"].price_per_hour_usd != 3.125  # without the file: the catalog's own


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[devices.h100_sxm]\nhbm_gbs = 1\n", "unknown fields"),
        ("[devices.h100_sxm]\nhbm_gbps = 'fast'\n", "non-negative number"),
        ("[gpus.h100]\nx = 1\n", "unknown top-level"),
        ("[devices.x.match]\nnames = ['(']\n", "bad pattern"),
        ("[devices.x\n", "not valid TOML"),
        ("[devices.x]\npeak_tflops = 5\n", "must be a table"),
        ("[devices.x.match]\nmemory_gib = [1]\n", "low, high"),
        ("[devices.x.match]\nmemory_gib = ['a', 'b']\n", r"memory_gib\[0\]: expected a non-negative number"),
        ("[devices.x.match]\nnames = 'acme'\n", r"match\.names: expected a list of strings"),
        ("[devices.x]\nnot_found = 5\n", r"not_found: expected a list of strings"),
        ("[devices.x]\npartitionable = 'yes'\n", "expected true or false"),
        ("[devices.x]\nname = 5\n", r"devices\.x\.name: expected a string"),
        ("[devices.x]\ncompute_units = -1\n", r"devices\.x\.compute_units: expected a non-negative number"),
    ],
)
def test_bad_user_file(tmp_path: Path, text: str, message: str) -> None:
    """Every fault of a user file is one HardwareConfigError, a PathError naming the file."""
    path = _write(tmp_path, text)
    with pytest.raises(HardwareConfigError, match=message) as info:
        load_catalog(path)
    assert isinstance(info.value, PathError) and info.value.path == str(path)
    assert str(info.value) == f"{path}: {info.value.reason}" and "\n" not in str(info.value)


def test_bad_user_file_through_the_cli_is_one_line(tmp_path: Path) -> None:
    """``$TRACEKIT_HARDWARE`` naming a file with an unknown field: a command that identifies
    the device prints one line ``error: <file>: <reason>`` and exits 2."""
    store = tmp_path / "s.duckdb"
    rid = tracekit.ingest([SAMPLES / "amd_synthetic_rocpd" / "27182_results.db"], store=store)[0].run_id
    analyze_runs([rid], store)
    bad = _write(tmp_path, "[devices.mi300x]\nhbm_gbs = 1\n")
    res = run_cli("summary", rid, "--store", str(store), env={"TRACEKIT_HARDWARE": str(bad)})
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [f"error: {bad}: devices.mi300x: unknown fields ['hbm_gbs']"]


def test_missing_explicit_user_file(tmp_path: Path) -> None:
    with pytest.raises(HardwareConfigError, match="not found"):
        load_catalog(tmp_path / "nope.toml")
