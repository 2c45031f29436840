"""The HTTP server a load URL names: parsed and checked once, connected to with the standard library.

The load client (``POST /v1/completions``) and the Prometheus scraper (``GET /metrics``) talk to
the same server; both take its address from here, so a URL is refused with the same one line
(``<url>: expected an http:// or https:// URL with a host``, ``<url>: bad port in the URL``)
whichever of them reads it first, and HTTPS is verified with the system's default context.
"""

from __future__ import annotations

import http.client
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from tracekit.errors import LoadInputError

__all__ = ["HttpTarget", "http_target"]


@dataclass(frozen=True)
class HttpTarget:
    """A server's address: ``url`` as given, ``scheme`` (``http``/``https``), ``host``, ``port``
    (80/443 when the URL has none), ``path`` (as given, without a trailing ``/``) and ``query``
    (without the ``?``; empty when none)."""

    url: str
    scheme: str
    host: str
    port: int
    path: str
    query: str

    def connect(self, timeout_s: float) -> http.client.HTTPConnection:
        """A new connection to the server (not yet opened), ``timeout_s`` seconds per socket
        operation."""
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout_s,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)

    def origin(self) -> str:
        """``scheme://host[:port]`` as the URL wrote it, without a ``user@`` (a URL with a password
        is refused by :func:`http_target`)."""
        return f"{self.scheme}://{urlsplit(self.url).netloc.rsplit('@', 1)[-1]}"

    def request_path(self) -> str:
        """What an HTTP request line names: ``path`` (``/`` when empty) and the ``?query``."""
        return (self.path or "/") + (f"?{self.query}" if self.query else "")


def http_target(url: str) -> HttpTarget:
    """Parse ``url``; raises :class:`LoadInputError` for one that is not http(s) with a host, whose
    port is not a number from 0 to 65535, or that holds a password (refused without repeating it)."""
    parts = urlsplit(url)
    if parts.password is not None:
        shown = parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]).geturl()
        raise LoadInputError(shown, "a password does not belong in the URL: it would be written into errors and "
                                    "the capture's files, and tracekit sends no credentials")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LoadInputError(url, "expected an http:// or https:// URL with a host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise LoadInputError(url, "bad port in the URL") from None
    return HttpTarget(url, parts.scheme, parts.hostname, port, parts.path.rstrip("/"), parts.query)
