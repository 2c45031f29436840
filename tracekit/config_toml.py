"""Reading a user's TOML settings file (the check config, the hardware file) into typed values.

Every fault of the file is one :class:`~tracekit.errors.PathError` of the caller's subclass,
``path`` the file and ``reason`` what is wrong (the CLI prints ``error: <path>: <reason>``):
unreadable, not TOML, an unknown key, a value of the wrong type.
"""

from __future__ import annotations

import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from tracekit.errors import PathError


def read_toml(path: Path, error: type[PathError]) -> dict[str, Any]:
    """The TOML document at ``path``; ``error(path, reason)`` when it cannot be read
    (``cannot read: …``) or parsed (``not valid TOML: …``)."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise error(path, f"cannot read: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise error(path, f"not valid TOML: {exc}") from None


def unknown_keys(table: Mapping[str, Any], known: set[str] | Mapping[str, Any]) -> list[str]:
    """The keys of ``table`` that ``known`` does not name, sorted."""
    return sorted(set(table) - set(known))


def typed_value(value: object, kind: type, where: str) -> Any:
    """``value`` as a ``kind`` (``float``, ``int``, ``str``, ``bool``): an integer is a float too,
    a boolean is never a number. TypeError naming ``where`` when it is not one."""
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise TypeError(f"{where}: expected a {kind.__name__}, got {value!r}")
    return value


def field_types(cls: type, exclude: frozenset[str] = frozenset()) -> dict[str, type]:
    """Field name → the type a TOML value of it must have, from the frozen dataclass ``cls``'s
    annotations (``float | None`` → ``float``), less the fields in ``exclude`` (not settings)."""
    hints = typing.get_type_hints(cls)
    out: dict[str, type] = {}
    for f in fields(cls):
        if f.name in exclude:
            continue
        hint = hints[f.name]
        if isinstance(hint, types.UnionType):
            (hint,) = (a for a in hint.__args__ if a is not type(None))
        out[f.name] = typing.get_origin(hint) or hint
    return out


def typed_table(cls: type, table: Mapping[str, Any], where: str, *, given: frozenset[str] = frozenset(),
                ignored: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The settings of ``table`` for the frozen dataclass ``cls``, each checked against its field's
    type (:func:`typed_value`): ValueError for an unknown key (neither a field nor in ``ignored``)
    or a missing field without a default, TypeError for a value of the wrong type; each message
    starts with ``where`` (``models.qwen3-8b``). Fields in ``given`` are set by the caller."""
    kinds = field_types(cls, exclude=given)
    bad = unknown_keys(table, {*kinds, *ignored})
    if bad:
        raise ValueError(f"{where}: unknown key(s) {', '.join(bad)} (known: {', '.join(sorted(kinds))})")
    required = [f.name for f in fields(cls) if f.name not in given and f.default is MISSING
                and f.default_factory is MISSING and f.name not in table]
    if required:
        raise ValueError(f"{where}: missing field(s) {', '.join(required)}")
    return {k: typed_value(v, kinds[k], f"{where}.{k}") for k, v in table.items() if k in kinds}
