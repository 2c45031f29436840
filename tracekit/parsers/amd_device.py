"""The device row of an AMD GPU from its HSA agent properties, as every AMD format gives them:
rocprofv3's ``agent_info`` CSV and results JSON (``rocprofv3_csv``), rocpd's ``rocpd_info_agent``
and its ``extdata`` (``rocpd``). Each reader looks a property up its own way; what the property
means is here, once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracekit.parsers.base import DeviceInfo


def amd_device_info(
    rank: int,
    device: int,
    *,
    name: str | None,
    arch: str | None,
    number: Callable[[str], int | None],
    memory_bytes: int | None,
    properties: dict[str, Any],
) -> DeviceInfo:
    """:class:`DeviceInfo` of GPU ``device`` (its HIP index) of ``rank``, its numeric properties
    read by ``number(key)`` (the lower-case HSA key: ``cu_count``, ``wave_front_size``,
    ``lds_size_in_kb``, ...; None when absent or unusable). ``memory_bytes``: device memory
    (bytes); ``properties``: what ``device_meta.properties`` keeps. LDS is given in KiB and stored
    in bytes; the clock (``max_engine_clk_fcompute``) in MHz; ``gfx_target_version`` is
    major * 10000 + minor * 100 + stepping."""
    wave = number("wave_front_size")
    waves_per_cu = number("max_waves_per_cu")
    lds_kb = number("lds_size_in_kb")
    clock = number("max_engine_clk_fcompute")
    gfx_version = number("gfx_target_version")
    return DeviceInfo(
        rank=rank,
        device=device,
        name=name,
        vendor="amd",
        arch=arch,
        compute_units=number("cu_count"),
        warp_size=wave,
        memory_bytes=memory_bytes,
        compute_major=gfx_version // 10000 if gfx_version else None,
        compute_minor=(gfx_version // 100) % 100 if gfx_version else None,
        max_threads_per_block=number("workgroup_max_size"),
        max_threads_per_cu=waves_per_cu * wave if waves_per_cu and wave else None,
        regs_per_block=None,
        regs_per_cu=None,
        shared_mem_per_block_bytes=lds_kb * 1024 if lds_kb else None,
        shared_mem_per_cu_bytes=lds_kb * 1024 if lds_kb else None,
        shared_mem_per_block_optin_bytes=None,
        properties=properties,
        device_type="GPU",
        clock_mhz=float(clock) if clock else None,
        xcc_count=number("num_xcc"),
        simd_per_cu=number("simd_per_cu"),
        max_waves_per_cu=waves_per_cu,
    )
