"""tracekit.config_toml: a user's TOML read into typed dataclass fields, every fault one PathError."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tracekit.config_toml import field_types, read_toml, typed_table, typed_value
from tracekit.errors import PathError


class _FileError(PathError):
    """The caller's own PathError subclass."""


@dataclass(frozen=True)
class _Settings:
    name: str
    rate: float = 1.0
    count: int | None = None
    on: bool = False


def test_field_types_unwrap_optional_and_leave_out_excluded() -> None:
    assert field_types(_Settings) == {"name": str, "rate": float, "count": int, "on": bool}
    assert field_types(_Settings, exclude=frozenset({"name"})) == {"rate": float, "count": int, "on": bool}


@pytest.mark.parametrize(
    ("value", "kind", "expected"),
    [(3, float, 3.0), (2.5, float, 2.5), (4, int, 4), ("x", str, "x"), (True, bool, True)],
)
def test_typed_value_accepts_its_kind(value: object, kind: type, expected: object) -> None:
    got = typed_value(value, kind, "k")
    assert got == expected and type(got) is kind


@pytest.mark.parametrize(("value", "kind"), [(True, int), (False, float), (2.5, int), ("3", int), (1, bool)])
def test_typed_value_refuses_another_kind(value: object, kind: type) -> None:
    with pytest.raises(TypeError, match=rf"^\[s\] k: expected a {kind.__name__}, got {value!r}$"):
        typed_value(value, kind, "[s] k")


def test_typed_table_unknown_missing_and_wrong_type() -> None:
    assert typed_table(_Settings, {"name": "a", "rate": 2}, "s") == {"name": "a", "rate": 2.0}
    with pytest.raises(ValueError, match=r"^s: unknown key\(s\) rte \(known: count, name, on, rate\)$"):
        typed_table(_Settings, {"name": "a", "rte": 2}, "s")
    with pytest.raises(ValueError, match=r"^s: missing field\(s\) name$"):
        typed_table(_Settings, {"rate": 2}, "s")
    with pytest.raises(TypeError, match=r"^s\.on: expected a bool, got 'yes'$"):
        typed_table(_Settings, {"name": "a", "on": "yes"}, "s")
    assert typed_table(_Settings, {"rate": 2, "note": "x"}, "s", given=frozenset({"name"}),
                       ignored=frozenset({"note"})) == {"rate": 2.0}


def test_read_toml_faults_are_the_callers_path_error(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text("[a]\nb = 1\n")
    assert read_toml(good, _FileError) == {"a": {"b": 1}}
    bad = tmp_path / "bad.toml"
    bad.write_text("[a\n")
    missing = tmp_path / "missing.toml"
    for path, reason in [(bad, "not valid TOML: "), (missing, "cannot read: ")]:
        with pytest.raises(_FileError) as info:
            read_toml(path, _FileError)
        assert info.value.path == str(path) and info.value.reason.startswith(reason)
        assert "\n" not in str(info.value)
