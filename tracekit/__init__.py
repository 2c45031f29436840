"""tracekit: one DuckDB schema for XLA/TPU, AMD and PyTorch profiler traces of LLM inference.

Python API (the CLI and dashboard are thin layers over it)::

    import tracekit
    results = tracekit.ingest(["trace.json.gz"], store="tracekit.duckdb")
    with tracekit.open_store("tracekit.duckdb", read_only=True) as con:
        con.sql("SELECT category, sum(dur_ns) FROM kernels GROUP BY ALL").show()
    run = tracekit.Store("tracekit.duckdb").run(results[0].run_id)   # notebooks: DataFrames
    run.kernel_time_by_class()

The names below are imported on first use (PEP 562): ``import tracekit`` stays light, so the
CLI can start reading a trace before DuckDB is loaded.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from tracekit.errors import QueryError, StoreError, TraceInputError, TracekitError

__version__ = "0.1.0"

if TYPE_CHECKING:
    from tracekit.frames import Run, Store
    from tracekit.ingest import IngestResult, ingest
    from tracekit.store import SCHEMA_VERSION, connect, open_store

_LAZY = {
    "IngestResult": "tracekit.ingest",
    "ingest": "tracekit.ingest",
    "SCHEMA_VERSION": "tracekit.store",
    "connect": "tracekit.store",
    "open_store": "tracekit.store",
    "Store": "tracekit.frames",
    "Run": "tracekit.frames",
}

__all__ = [
    "SCHEMA_VERSION",
    "IngestResult",
    "QueryError",
    "Run",
    "Store",
    "StoreError",
    "TraceInputError",
    "TracekitError",
    "__version__",
    "connect",
    "ingest",
    "open_store",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """``tracekit.ingest`` is the function: importing the submodule of the same name (which the
    import system then sets as a package attribute) must not replace it."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "ingest" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
