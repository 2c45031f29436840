"""The documented limits of one input (tracekit.limits): settings checked in one line, and the
decompression-ratio cap of every gzip reader that goes through parsers._io.iter_decompressed."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from tracekit import limits
from tracekit.errors import ConfigError
from tracekit.parsers._io import iter_decompressed


def _zero_bomb(path: Path, mib: int) -> Path:
    """``mib`` MiB of zero bytes, gzipped at level 9 (about 1,000:1)."""
    c = zlib.compressobj(9, wbits=31)
    block = bytes(1 << 20)
    with path.open("wb") as f:
        for _ in range(mib):
            f.write(c.compress(block))
        f.write(c.flush())
    return path


def test_bomb_is_refused_before_it_is_inflated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRACEKIT_MAX_INFLATE_RATIO", raising=False)
    bomb = _zero_bomb(tmp_path / "bomb.json.gz", 300)
    size = bomb.stat().st_size
    seen = 0
    with pytest.raises(limits.InputLimitError) as info:
        for block in iter_decompressed(bomb):
            seen += len(block)
    # refused within one 1 MiB block of 64 MiB out (200 x what was read by then is far less),
    # not after 300 MiB
    assert size < (2 << 20) and seen <= limits.INFLATE_FREE_BYTES
    assert "TRACEKIT_MAX_INFLATE_RATIO" in str(info.value) and "\n" not in str(info.value)


def test_cap_can_be_lifted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bomb = _zero_bomb(tmp_path / "bomb.json.gz", 100)
    monkeypatch.setenv("TRACEKIT_MAX_INFLATE_RATIO", "0")
    assert sum(len(b) for b in iter_decompressed(bomb)) == 100 << 20


def test_small_files_may_compress_well(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under 64 MiB out, any ratio is fine: a tiny trace of repeated events compresses 1,000:1."""
    monkeypatch.delenv("TRACEKIT_MAX_INFLATE_RATIO", raising=False)
    small = _zero_bomb(tmp_path / "small.json.gz", 60)
    assert sum(len(b) for b in iter_decompressed(small)) == 60 << 20


@pytest.mark.parametrize(("text", "expected"), [("512MB", 512_000_000), ("2GiB", 2 << 30), ("1.5GB", 1_500_000_000),
                                                ("100000000", 100_000_000)])
def test_sizes_read_like_duckdb(text: str, expected: int) -> None:
    assert limits.parse_size(text, "X") == expected


@pytest.mark.parametrize("variable", ["TRACEKIT_MAX_INFLATE_RATIO", "TRACEKIT_MAX_EVENT_BYTES"])
def test_bad_settings_name_the_variable(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    monkeypatch.setenv(variable, "-3x")
    with pytest.raises(ConfigError) as info:
        limits.max_inflate_ratio() if variable.endswith("RATIO") else limits.max_event_bytes()
    assert str(info.value).startswith(f"{variable}: ")


def test_full_temp_dir_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        limits.check_temp_space(1 << 62, tmp_path)
    assert "bytes free" in str(info.value) and "\n" not in str(info.value)
