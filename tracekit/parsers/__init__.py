"""Trace parsers, one module per input format, each registered by format name.

The parser modules are imported (and so registered) on first use of ``REGISTRY``,
``get_parser`` and friends, not when this package is imported: the CLI reads the first Kineto
file ahead (``kineto.read_ahead``) before it imports DuckDB and the other formats' readers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracekit.parsers.base import REGISTRY, IngestContext, Parser, RankInfo

__all__ = ["REGISTRY", "IngestContext", "Parser", "RankInfo", "get_parser"]

#: the built-in parser modules; importing one registers its format
BUILTIN = ("kineto", "nsys", "rocpd", "rocprofv3_csv", "rocprofv3_json", "rpd", "xplane")


def _load_builtins() -> None:
    for name in BUILTIN:
        importlib.import_module(f"tracekit.parsers.{name}")


def get_parser(format_name: str) -> Parser:
    """An instance of the parser registered under ``format_name``."""
    _load_builtins()
    from tracekit.parsers.base import REGISTRY

    return REGISTRY[format_name]()


def __getattr__(name: str) -> Any:
    if name in ("REGISTRY", "IngestContext", "Parser", "RankInfo"):
        _load_builtins()
        from tracekit.parsers import base

        return getattr(base, name)
    raise AttributeError(f"module 'tracekit.parsers' has no attribute {name!r}")
