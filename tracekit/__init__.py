"""tracekit: one DuckDB schema for XLA/TPU, AMD and PyTorch profiler traces of LLM inference.

Python API (the CLI and dashboard are thin layers over it)::

    import tracekit
    results = tracekit.ingest(["trace.json.gz"], store="tracekit.duckdb")
    with tracekit.open_store("tracekit.duckdb", read_only=True) as con:
        con.sql("SELECT category, sum(dur_ns) FROM kernels GROUP BY ALL").show()
"""

__version__ = "0.1.0"

from tracekit.errors import QueryError, StoreError, TraceInputError, TracekitError
from tracekit.ingest import IngestResult, ingest
from tracekit.store import SCHEMA_VERSION, connect, open_store

__all__ = [
    "SCHEMA_VERSION",
    "IngestResult",
    "QueryError",
    "StoreError",
    "TraceInputError",
    "TracekitError",
    "__version__",
    "connect",
    "ingest",
    "open_store",
]
