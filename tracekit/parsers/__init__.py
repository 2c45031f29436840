"""Trace parsers, one module per input format, each registered by format name."""

from tracekit.parsers import kineto as _kineto  # noqa: F401  (registers "kineto")
from tracekit.parsers import rocpd as _rocpd  # noqa: F401  (registers "rocpd")
from tracekit.parsers import rocprofv3_csv as _rocprofv3_csv  # noqa: F401  (registers "rocprofv3")
from tracekit.parsers import rocprofv3_json as _rocprofv3_json  # noqa: F401  (registers "rocprofv3_json")
from tracekit.parsers import rpd as _rpd  # noqa: F401  (registers "rpd")
from tracekit.parsers import xplane as _xplane  # noqa: F401  (registers "xplane")
from tracekit.parsers.base import REGISTRY, IngestContext, Parser, RankInfo

__all__ = ["REGISTRY", "IngestContext", "Parser", "RankInfo", "get_parser"]


def get_parser(format_name: str) -> Parser:
    """An instance of the parser registered under ``format_name``."""
    return REGISTRY[format_name]()
