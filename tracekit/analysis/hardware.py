"""Hardware catalog: published peaks of TPU, AMD Instinct and NVIDIA devices, and which one a trace ran on.

The catalog is data (``hardware.toml`` next to this module, read with :mod:`tomllib`); every number
in it cites its source. A user file can override fields of a known device, add devices and set
prices (``$TRACEKIT_HARDWARE``, else ``~/.config/tracekit/hardware.toml``). ``docs/hardware.md``
describes the fields, the identification rules and the units traps.

Units used throughout:

- ``peak_tflops[dtype]``: **dense** TFLOP/s (10¹² FLOP/s; TOP/s for ``int8``), no 2:4 sparsity.
- ``hbm_gbps``: GB/s = 10⁹ B/s (never GiB/s; XProf displays GiB/s).
- ``interconnect_gbps``: GB/s **per direction** of the device's scale-up links (NVLink, Infinity
  Fabric), all links together: half the "bidirectional" figure vendors print. Collectives' bus
  bandwidth (NCCL-tests busbw) is compared with it, never with HBM.
- ``hbm_bytes``: bytes. ``clock_mhz``: MHz. ``price_per_hour_usd``: US dollars per device-hour.
- :func:`ridge_point`: FLOP/byte.

Everything here is a pure function of its arguments (plus the files :func:`load_catalog` reads).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from tracekit.config_toml import field_types, read_toml, unknown_keys
from tracekit.errors import PathError

#: Environment variable naming a user hardware file.
ENV_VAR = "TRACEKIT_HARDWARE"

#: Fields every catalog device states, or lists in ``not_found`` / ``not_applicable``.
STANDARD_FIELDS = (
    "peak_tflops.bf16", "peak_tflops.fp16", "peak_tflops.fp8", "peak_tflops.int8", "peak_tflops.fp32",
    "hbm_gbps", "hbm_bytes", "compute_units", "matrix_units", "max_warps_per_cu", "warp_size",
    "matrix_tile", "clock_mhz", "xcc_count", "interconnect_gbps",
)

_NUMBER_FIELDS = (
    "hbm_gbps", "hbm_bytes", "interconnect_gbps", "compute_units", "matrix_units", "cus_per_xcc", "xcc_count",
    "max_warps_per_cu", "warp_size", "clock_mhz", "price_per_hour_usd", "owned_capex_usd", "owned_years",
    "owned_power_w", "owned_usd_per_kwh",
)
_TEXT_FIELDS = ("name", "vendor", "hbm_capacity", "matrix_tile", "notes")
_LIST_FIELDS = ("not_found", "not_applicable")
_TABLE_FIELDS = ("peak_tflops", "sources", "match")
_DEVICE_FIELDS = set(_NUMBER_FIELDS) | set(_TEXT_FIELDS) | set(_LIST_FIELDS) | set(_TABLE_FIELDS) | {
    "partitionable"
}
_MATCH_FIELDS = {"names", "reject_names", "arch", "compute_capability", "memory_gib", "clock_mhz"}
_KNOWN_VENDORS = {"google", "nvidia", "amd"}


class HardwareConfigError(PathError):
    """A hardware catalog or user hardware file is missing, unreadable, not TOML, or has an
    unknown field or a field of the wrong kind (``path`` the file)."""


@dataclass(frozen=True)
class MatchRule:
    """How traces name a device model. Identification rules, not spec values.

    ``names``/``reject_names``: regular expressions searched (case-insensitive) in the trace's
    device name and device type string. ``arch``: gfx targets or ``sm_XY``. ``compute_capability``:
    ``"major.minor"`` as the trace states it (HIP reports 9.4 for gfx942). ``memory_gib``: bounds
    (GiB = 2³⁰ B) on the memory the device reports. ``clock_mhz``: required max clock, when set.
    """

    names: tuple[str, ...] = ()
    reject_names: tuple[str, ...] = ()
    arch: tuple[str, ...] = ()
    compute_capability: str | None = None
    memory_gib: tuple[float, float] | None = None
    clock_mhz: float | None = None


@dataclass(frozen=True)
class DeviceSpec:
    """Peaks and structure of one device as a trace sees it (one GCD, one partition, one chip).

    ``sources`` maps a field path (``"hbm_gbps"``, ``"peak_tflops.bf16"``) to where its value
    came from: a catalog source key or URL, ``"trace"``, or ``"user config <path>"``.
    ``compute_scale``/``hbm_scale`` are the partition factors applied to the package values
    (1.0 for a whole device). ``matched_by`` is ``"name"``, ``"hardware"`` or ``"trace"`` after
    :func:`identify`, ``None`` in the catalog.
    """

    key: str
    name: str
    vendor: str
    peak_tflops: Mapping[str, float] = field(default_factory=dict)  # dense TFLOP/s (int8: TOP/s)
    hbm_gbps: float | None = None  # GB/s, 1e9 B/s
    interconnect_gbps: float | None = None  # GB/s per direction, all scale-up links of the device
    hbm_bytes: int | None = None  # bytes
    hbm_capacity: str | None = None  # as the source spells it
    compute_units: int | None = None  # SMs (NVIDIA), CUs (AMD), TensorCores (TPU)
    matrix_units: int | None = None  # Tensor Cores, matrix cores, MXUs
    cus_per_xcc: int | None = None  # AMD: CUs per XCD
    xcc_count: int | None = None  # AMD: XCDs
    max_warps_per_cu: int | None = None  # resident warps per SM / waves per CU
    warp_size: int | None = None  # threads
    matrix_tile: str | None = None  # MXU size or MMA/MFMA shapes
    clock_mhz: float | None = None  # MHz the peaks assume
    price_per_hour_usd: float | None = None  # USD per device-hour (user file): the rented price sheet
    owned_capex_usd: float | None = None  # USD per device, server share included (user file): owned sheet
    owned_years: float | None = None  # years the capex is amortised over
    owned_power_w: float | None = None  # W per device at load, cooling and server share included
    owned_usd_per_kwh: float | None = None  # USD per kWh

    def owned_per_hour_usd(self) -> float | None:
        """The owned price sheet as USD per device-hour: capex ÷ (years × 8766 h) + power (kW) × USD/kWh;
        None unless all four owned fields are set."""
        if None in (self.owned_capex_usd, self.owned_years, self.owned_power_w, self.owned_usd_per_kwh):
            return None
        assert self.owned_capex_usd is not None and self.owned_years and self.owned_power_w is not None
        assert self.owned_usd_per_kwh is not None
        return self.owned_capex_usd / (self.owned_years * 8766.0) + self.owned_power_w / 1000 * self.owned_usd_per_kwh
    partitionable: bool = False
    sources: Mapping[str, str] = field(default_factory=dict)
    not_found: tuple[str, ...] = ()
    not_applicable: tuple[str, ...] = ()
    notes: str = ""
    match: MatchRule = field(default_factory=MatchRule)
    compute_scale: float = 1.0
    hbm_scale: float = 1.0
    matched_by: str | None = None

    def source(self, field_path: str) -> str | None:
        """Where ``field_path`` (e.g. ``"peak_tflops.fp8"``) came from, or None if unset."""
        return self.sources.get(field_path)


#: DeviceSpec's fields and their types: a number field of type int is stored whole
_SPEC_TYPES = field_types(DeviceSpec)


# --------------------------------------------------------------------------------------------
# Loading and merging


def catalog_path() -> Path:
    """The packaged catalog file."""
    return Path(str(resources.files("tracekit.analysis").joinpath("hardware.toml")))


def user_config_path(extra: Path | None = None) -> Path | None:
    """The user hardware file to merge: ``extra``, else ``$TRACEKIT_HARDWARE``, else
    ``~/.config/tracekit/hardware.toml`` when it exists. An explicit path that does not exist
    is an error; a missing default file is not."""
    if extra is not None:
        return _existing(Path(extra))
    env = os.environ.get(ENV_VAR)
    if env:
        return _existing(Path(env))
    default = Path.home() / ".config" / "tracekit" / "hardware.toml"
    return default if default.is_file() else None


def source_citations() -> dict[str, str]:
    """Source key (``"R-300"``) → citation (URL or repository path) of the packaged catalog."""
    cat = read_toml(catalog_path(), HardwareConfigError).get("catalog", {})
    return {str(k): str(v) for k, v in cat.get("sources", {}).items()}


def load_catalog(extra: Path | None = None) -> dict[str, DeviceSpec]:
    """Catalog key → :class:`DeviceSpec`, with the user file (see :func:`user_config_path`) merged in.

    A user device table with a known key overrides just the fields it sets (its values are cited
    as ``user config <path>`` unless it gives its own ``sources``); a new key adds a device.
    Parsed once per version of the two files (a TOML parse costs 15 ms; the dashboard asks on
    every page): a changed file (size or modification time) is read again.
    """
    user = user_config_path(extra)
    key = _identity(user)
    cached = _CATALOGS.get(key)
    if cached is None:
        devices: dict[str, Any] = dict(read_toml(catalog_path(), HardwareConfigError).get("devices", {}))
        if user is not None:
            devices = _merge_user(devices, read_toml(user, HardwareConfigError), user)
        cached = {k: _spec(k, table, origin=user or catalog_path()) for k, table in devices.items()}
        _CATALOGS.clear()  # one version kept
        _CATALOGS[key] = cached
    return dict(cached)  # DeviceSpec is frozen; the dict is the caller's


def catalog_identity(extra: Path | None = None) -> tuple[Any, ...]:
    """What :func:`load_catalog` reads, identified by each file's inode, size and modification
    time: equal identities, equal catalogs (a cache of identified devices can be keyed by it)."""
    return _identity(user_config_path(extra))


def _identity(user: Path | None) -> tuple[Any, ...]:
    return (_file_key(catalog_path()), None if user is None else (str(user), _file_key(user)))


#: load_catalog's parsed catalog, by the identity of the files it was read from.
_CATALOGS: dict[tuple[Any, ...], dict[str, DeviceSpec]] = {}


def _file_key(path: Path) -> tuple[int, int, int]:
    try:
        st = path.stat()
    except OSError:
        return (-1, -1, -1)  # read_toml then says what is wrong
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _existing(path: Path) -> Path:
    if not path.is_file():
        raise HardwareConfigError(path, "hardware file not found")
    return path


def _merge_user(devices: dict[str, Any], user: dict[str, Any], path: Path) -> dict[str, Any]:
    unknown = unknown_keys(user, {"devices"})
    if unknown:
        raise HardwareConfigError(path, f"unknown top-level tables {unknown} (expected [devices.<key>])")
    merged = dict(devices)
    for key, table in user.get("devices", {}).items():
        if not isinstance(table, dict):
            raise HardwareConfigError(path, f"devices.{key} must be a table")
        _check_kinds(table, path, f"devices.{key}")
        base = devices.get(key, {"name": key, "vendor": "other"})
        merged[key] = _merge_device(base, table, f"user config {path}")
    return merged


def _check_kinds(table: Mapping[str, Any], path: Path, where: str) -> None:
    """A user device table's tables, lists, texts and flag are of their kinds (numbers are
    checked by :func:`_spec`, after the merge)."""
    for name, value in table.items():
        if name in _TABLE_FIELDS and not isinstance(value, dict):
            raise HardwareConfigError(path, f"{where}.{name} must be a table")
        if name in _LIST_FIELDS:
            _strings(value, path, f"{where}.{name}")
        if name in _TEXT_FIELDS and not isinstance(value, str):
            raise HardwareConfigError(path, f"{where}.{name}: expected a string, got {value!r}")
        if name == "partitionable" and not isinstance(value, bool):
            raise HardwareConfigError(path, f"{where}.{name}: expected true or false, got {value!r}")


def _strings(value: Any, path: Path, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise HardwareConfigError(path, f"{where}: expected a list of strings, got {value!r}")
    return tuple(value)


def _merge_device(base: dict[str, Any], over: dict[str, Any], cite: str) -> dict[str, Any]:
    out = dict(base)
    sources = _flatten(base.get("sources", {}))
    cleared: set[str] = set()
    for name, value in over.items():
        if name in ("peak_tflops", "match"):
            out[name] = {**base.get(name, {}), **value}
        elif name != "sources":
            out[name] = value
        if name not in ("sources", "match", "name", "vendor", "notes", "partitionable", *_LIST_FIELDS):
            paths = [f"{name}.{k}" for k in value] if name == "peak_tflops" else [name]
            sources.update({p: cite for p in paths})
            cleared.update(paths)
    sources.update(_flatten(over.get("sources", {})))
    out["sources"] = sources
    for lst in _LIST_FIELDS:
        out[lst] = [f for f in base.get(lst, []) if f not in cleared] + list(over.get(lst, []))
    return out


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in table.items():
        if isinstance(v, Mapping):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = str(v)
    return out


def _spec(key: str, t: Mapping[str, Any], origin: Path) -> DeviceSpec:
    where = f"devices.{key}"
    bad = unknown_keys(t, _DEVICE_FIELDS)
    if bad:
        raise HardwareConfigError(origin, f"{where}: unknown fields {bad}")
    # the number fields (whole where DeviceSpec's field is an int) and the optional text fields
    values: dict[str, Any] = {name: _SPEC_TYPES[name](_number(t[name], origin, f"{where}.{name}"))
                              for name in _NUMBER_FIELDS if name in t}
    values.update({name: str(t[name]) for name in ("hbm_capacity", "matrix_tile") if name in t})
    return DeviceSpec(
        key=key,
        name=_text(t, "name") or key,
        vendor=(_text(t, "vendor") or "other").lower(),
        peak_tflops={str(d): _number(v, origin, f"{where}.peak_tflops.{d}")
                     for d, v in t.get("peak_tflops", {}).items()},
        **values,
        partitionable=bool(t.get("partitionable", False)),
        sources=_flatten(t.get("sources", {})),
        not_found=tuple(str(x) for x in t.get("not_found", ())),
        not_applicable=tuple(str(x) for x in t.get("not_applicable", ())),
        notes=_text(t, "notes") or "",
        match=_rule(t.get("match", {}), origin, where),
    )


def _text(t: Mapping[str, Any], name: str) -> str | None:
    return str(t[name]) if name in t else None


def _number(value: Any, origin: Path, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise HardwareConfigError(origin, f"{where}: expected a non-negative number, got {value!r}")
    return float(value)


def _rule(m: Mapping[str, Any], origin: Path, where: str) -> MatchRule:
    bad = unknown_keys(m, _MATCH_FIELDS)
    if bad:
        raise HardwareConfigError(origin, f"{where}.match: unknown fields {bad}")
    for name in ("names", "reject_names", "arch"):
        _strings(m.get(name, []), origin, f"{where}.match.{name}")
    for pattern in [*m.get("names", ()), *m.get("reject_names", ())]:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise HardwareConfigError(origin, f"{where}.match: bad pattern {pattern!r}: {exc}") from None
    mem = m.get("memory_gib")
    if mem is not None and (not isinstance(mem, list) or len(mem) != 2):
        raise HardwareConfigError(origin, f"{where}.match.memory_gib: expected [low, high] in GiB")
    for i, bound in enumerate(mem or []):
        _number(bound, origin, f"{where}.match.memory_gib[{i}]")
    if "clock_mhz" in m:
        _number(m["clock_mhz"], origin, f"{where}.match.clock_mhz")
    return MatchRule(
        names=tuple(m.get("names", ())),
        reject_names=tuple(m.get("reject_names", ())),
        arch=tuple(a.lower() for a in m.get("arch", ())),
        compute_capability=str(m["compute_capability"]) if "compute_capability" in m else None,
        memory_gib=(float(mem[0]), float(mem[1])) if mem else None,
        clock_mhz=float(m["clock_mhz"]) if "clock_mhz" in m else None,
    )


# --------------------------------------------------------------------------------------------
# Identification


def identify(
    device_row: Mapping[str, Any], catalog: Mapping[str, DeviceSpec] | None = None
) -> DeviceSpec | None:
    """The spec of the device a ``devices`` row describes, or None if it cannot be told.

    1. Candidates whose ``match.names`` occur in the row's ``name`` or ``device_type`` (Kineto
       ``deviceProperties.name``, XPlane ``device_type_string``, rocprof product name); if none,
       candidates whose ``arch`` (gfx target, ``sm_XY``) or compute capability match and whose
       CU/SM count fits (hardware match, e.g. XPlane ``AMD GPU (compute capability 9.4, 304 CUs)``).
    2. Candidates that contradict the row (vendor, arch, compute capability, CU count, memory,
       required clock, warp size) are dropped; exactly one must remain.
    3. AMD partition modes: fewer CUs than the package scale the peaks (see :func:`scale_partition`).
    4. Peaks the trace states itself (XPlane TPU plane stats) replace the catalog's, cited ``"trace"``.

    A row that matches nothing but states its own peaks yields a spec built from the trace alone.
    """
    specs = load_catalog() if catalog is None else catalog
    spec = _match(device_row, specs.values())
    if spec is None:
        return _trace_only(device_row)
    return apply_trace_peaks(scale_partition(spec, device_row), device_row)


def run_device(con: Any, run_id: str) -> tuple[dict[str, Any] | None, DeviceSpec | None]:
    """The ``devices`` row of the run's busiest device (most device rows; ties by rank, device)
    and its catalog spec (None when the device is a CPU or not identified). The device every
    analyzer costs against; shown as the run's catalog device by the overview and dashboard."""
    r = con.execute(
        """WITH busy AS (SELECT rank, device, count(*) AS n FROM kernels WHERE run_id = ? GROUP BY ALL)
           SELECT d.* FROM devices d LEFT JOIN busy b USING (rank, device)
           WHERE d.run_id = ? ORDER BY b.n DESC NULLS LAST, d.rank, d.device LIMIT 1""",
        [run_id, run_id],
    )
    cols = [c[0] for c in r.description]
    rows = r.fetchall()
    if not rows:
        return None, None
    row = dict(zip(cols, rows[0], strict=True))
    if row.get("vendor") == "cpu":
        return row, None
    return row, identify(row)


def device_kinds(con: Any) -> list[tuple[int, dict[str, Any], DeviceSpec | None]]:
    """Every run's main device (the runs' rollup, view ``run_main_device``: no event is read),
    grouped into kinds of device: creates the TEMP table ``run_device_kind(run_id, kind, …the
    device's columns)`` and
    returns (kind, the ``devices`` row without ``run_id``, ``rank``, ``device`` and the raw
    ``properties`` JSON, which :func:`identify` does not read, its catalog spec or None) per kind.
    A kind is the hash of the row's other columns, so the per-run part stays in SQL and each kind
    is identified once (10,000 runs of 23 kinds of device: 23 lookups). Runs without a device row
    have no ``run_device_kind`` row."""
    cols = [str(r[0]) for r in con.execute("DESCRIBE devices").fetchall()
            if r[0] not in ("run_id", "rank", "device", "properties")]
    listed = ", ".join(f'd."{c}"' for c in cols)
    con.execute(f"""CREATE OR REPLACE TEMP TABLE run_device_kind AS
                    SELECT run_id, hash({listed}) AS kind, {listed}
                    FROM devices d JOIN run_main_device USING (run_id, rank, device)""")
    quoted = ", ".join(f'"{c}"' for c in cols)
    r = con.execute(f"""SELECT kind, {quoted} FROM run_device_kind
                        QUALIFY row_number() OVER (PARTITION BY kind ORDER BY run_id) = 1""")
    out: list[tuple[int, dict[str, Any], DeviceSpec | None]] = []
    catalog: dict[str, DeviceSpec] | None = None  # read only if needed
    for kind, *values in r.fetchall():
        row = dict(zip(cols, values, strict=True))
        if row.get("vendor") == "cpu":
            out.append((int(kind), row, None))
            continue
        if catalog is None:
            catalog = load_catalog()
        out.append((int(kind), row, identify(row, catalog)))
    return out


def ridge_point(spec: DeviceSpec, dtype: str = "bf16") -> float | None:
    """Arithmetic intensity (FLOP/byte) where ``dtype``'s peak meets HBM bandwidth; None if unknown.

    ``peak_tflops[dtype]·10¹² / (hbm_gbps·10⁹)``. TPU v6e from its trace: 918 / 1637.99 → 560.44.
    """
    peak = spec.peak_tflops.get(dtype)
    if peak is None or not spec.hbm_gbps:
        return None
    return peak * 1e12 / (spec.hbm_gbps * 1e9)


def scale_partition(spec: DeviceSpec, device_row: Mapping[str, Any]) -> DeviceSpec:
    """Per-partition peaks of a partitionable AMD device (MI300X/MI325X/MI355X SPX/DPX/QPX/CPX).

    The trace's CU count (``compute_units``) and XCC count (``xcc_count``; else CUs ÷ CUs per XCC)
    give the partition's share: compute peaks and matrix units scale by CUs/CUs of the package,
    HBM bandwidth by XCCs/XCCs of the package (MI300X CPX: 38 CUs, 1 XCC → ⅛ of 1307.4 TFLOP/s
    and ⅛ of 5300 GB/s). hardware-peaks.md §4.3: partition modes shrink CUs and HBM channels per
    device; take the CU count from the trace, never from the model name.
    """
    cus = _int(device_row, "compute_units")
    full = spec.compute_units
    if not spec.partitionable or cus is None or full is None or cus >= full or not spec.xcc_count:
        return spec
    xccs = _int(device_row, "xcc_count") or _partition_xccs(spec, cus)
    if not xccs:
        return spec
    cu_ratio, xcc_ratio = cus / full, xccs / spec.xcc_count
    sources = dict(spec.sources)
    for dtype in spec.peak_tflops:
        path = f"peak_tflops.{dtype}"
        sources[path] = f"{spec.source(path)} x {cus}/{full} CUs (partition)"
    sources["hbm_gbps"] = f"{spec.source('hbm_gbps')} x {xccs}/{spec.xcc_count} XCCs (partition)"
    sources["compute_units"] = "trace"
    stated = _int(device_row, "xcc_count")
    sources["xcc_count"] = "trace" if stated else f"trace: {cus} CUs / {spec.cus_per_xcc}"
    mem = _int(device_row, "memory_bytes")
    if mem:
        sources["hbm_bytes"] = "trace"
    return replace(
        spec,
        peak_tflops={d: v * cu_ratio for d, v in spec.peak_tflops.items()},
        hbm_gbps=spec.hbm_gbps * xcc_ratio if spec.hbm_gbps is not None else None,
        hbm_bytes=mem or spec.hbm_bytes,
        compute_units=cus,
        xcc_count=xccs,
        matrix_units=round(spec.matrix_units * cu_ratio) if spec.matrix_units is not None else None,
        compute_scale=cu_ratio,
        hbm_scale=xcc_ratio,
        sources=sources,
    )


def apply_trace_peaks(spec: DeviceSpec, device_row: Mapping[str, Any]) -> DeviceSpec:
    """Replace catalog peaks by those the trace states (``peak_tflops`` → bf16, ``peak_hbm_gbps``).

    Only TPU XPlane plane stats fill these columns; their single FLOP peak is the bf16 peak
    (hardware-peaks.md §4.5) and their bandwidth is GB/s (10⁹ B/s). The GPU ``memory_bandwidth``
    stat is *not* used: on AMD it is half the real peak (§4.7).
    """
    tflops, gbps = _float(device_row, "peak_tflops"), _float(device_row, "peak_hbm_gbps")
    if not tflops and not gbps:
        return spec
    peaks, sources = dict(spec.peak_tflops), dict(spec.sources)
    if tflops:
        peaks["bf16"], sources["peak_tflops.bf16"] = tflops, "trace"
    if gbps:
        sources["hbm_gbps"] = "trace"
    return replace(spec, peak_tflops=peaks, hbm_gbps=gbps or spec.hbm_gbps, sources=sources)


def _match(row: Mapping[str, Any], specs: Iterable[DeviceSpec]) -> DeviceSpec | None:
    specs = list(specs)
    texts = [t for t in (row.get("name"), row.get("device_type")) if isinstance(t, str) and t.strip()]
    pool, how = [s for s in specs if _name_matches(s.match, texts)], "name"
    if not pool:
        pool, how = [s for s in specs if _hardware_matches(s, row)], "hardware"
    fits = [s for s in pool if _consistent(s, row)]
    return replace(fits[0], matched_by=how) if len(fits) == 1 else None


def _name_matches(rule: MatchRule, texts: list[str]) -> bool:
    def hit(patterns: tuple[str, ...]) -> bool:
        return any(re.search(p, t, re.IGNORECASE) for p in patterns for t in texts)

    return hit(rule.names) and not hit(rule.reject_names)


def _hardware_matches(spec: DeviceSpec, row: Mapping[str, Any]) -> bool:
    arch = row.get("arch")
    by_arch = isinstance(arch, str) and arch.lower() in spec.match.arch
    by_cc = spec.match.compute_capability is not None and _cc(row) == spec.match.compute_capability
    names = [t for t in (row.get("name"), row.get("device_type")) if isinstance(t, str)]
    rejected = any(re.search(p, t, re.IGNORECASE) for p in spec.match.reject_names for t in names)
    return (by_arch or by_cc) and _int(row, "compute_units") is not None and not rejected


def _consistent(spec: DeviceSpec, row: Mapping[str, Any]) -> bool:
    rule = spec.match
    vendor, arch, cc = row.get("vendor"), row.get("arch"), _cc(row)
    if vendor in _KNOWN_VENDORS and vendor != spec.vendor:
        return False
    if isinstance(arch, str) and rule.arch and arch.lower() not in rule.arch:
        return False
    if cc is not None and rule.compute_capability is not None and cc != rule.compute_capability:
        return False
    warp = _int(row, "warp_size")
    if warp is not None and spec.warp_size is not None and warp != spec.warp_size:
        return False
    clock = _float(row, "clock_mhz")
    if clock and rule.clock_mhz and abs(clock - rule.clock_mhz) > 0.01 * rule.clock_mhz:
        return False
    return _cus_fit(spec, _int(row, "compute_units")) and _memory_fits(spec, _int(row, "memory_bytes"))


def _cus_fit(spec: DeviceSpec, cus: int | None) -> bool:
    if cus is None or spec.compute_units is None or cus == spec.compute_units:
        return True
    return spec.partitionable and cus < spec.compute_units and _partition_xccs(spec, cus) is not None


def _partition_xccs(spec: DeviceSpec, cus: int) -> int | None:
    """XCCs of a partition with ``cus`` CUs: a whole number of XCDs dividing the package's count."""
    per, total = spec.cus_per_xcc, spec.xcc_count
    if not per or not total or cus <= 0 or cus % per:
        return None
    xccs = cus // per
    return xccs if total % xccs == 0 else None


def _memory_fits(spec: DeviceSpec, mem: int | None) -> bool:
    """Reported memory within ``match.memory_gib``; partitionable parts may show 1/2, 1/4, 1/8 (NPS)."""
    if mem is None or spec.match.memory_gib is None:
        return True
    lo, hi = spec.match.memory_gib
    shares = (1, 2, 4, 8) if spec.partitionable else (1,)
    return any(lo <= mem * s / 2**30 <= hi for s in shares)


def _trace_only(row: Mapping[str, Any]) -> DeviceSpec | None:
    tflops, gbps = _float(row, "peak_tflops"), _float(row, "peak_hbm_gbps")
    if not tflops and not gbps:
        return None
    name = row.get("name") or row.get("device_type") or "unknown device"
    vendor = row.get("vendor") or "other"
    return DeviceSpec(
        key="trace",
        name=str(name),
        vendor=str(vendor),
        peak_tflops={"bf16": tflops} if tflops else {},
        hbm_gbps=gbps or None,
        sources={
            **({"peak_tflops.bf16": "trace"} if tflops else {}),
            **({"hbm_gbps": "trace"} if gbps else {}),
        },
        matched_by="trace",
    )


def _cc(row: Mapping[str, Any]) -> str | None:
    major, minor = _int(row, "compute_major"), _int(row, "compute_minor")
    return None if major is None or minor is None else f"{major}.{minor}"


def _float(row: Mapping[str, Any], key: str) -> float | None:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def _int(row: Mapping[str, Any], key: str) -> int | None:
    value = _float(row, key)
    return None if value is None else int(value)
