"""Scraping an inference server's Prometheus endpoint while a load runs.

vLLM and SGLang serve ``GET /metrics`` in the Prometheus text exposition format (counters such
as ``vllm:prefix_cache_hits_total``, gauges such as ``vllm:num_requests_waiting``, histograms as
``_bucket``/``_sum``/``_count`` samples). :func:`parse_metrics` reads that text into
:class:`ServerSample` rows (one per exposed sample, names as exposed: the ``:`` of ``vllm:`` and
the ``_total`` of counters kept); :class:`Scraper` fetches the endpoint from a background thread
every ``interval_s`` seconds and returns a :class:`ScrapeLog` of timestamped scrapes (Unix-epoch
ns, taken just before each request). Values are what the server exposes, in its units (counters
cumulative since the server started; ``*_seconds`` in seconds; ``*_perc`` gauges as fractions 0..1).

A server without ``/metrics`` (HTTP 404, connection refused) fails nothing: the log is empty and
its ``errors`` say why. Only the standard library's :mod:`http.client` is used for the requests,
and nothing but the given server is contacted (its address read by :mod:`.http_target`, as the
load client's is). The text is parsed by ``prometheus_client``.
"""

from __future__ import annotations

import http.client
import math
import threading
import time
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from tracekit.collectors.load.http_target import http_target
from tracekit.errors import LoadInputError

#: Distinct error texts a :class:`ScrapeLog` keeps (later ones are dropped).
MAX_ERRORS = 5

#: Largest ``/metrics`` response read (bytes); a larger one is a scrape error.
MAX_BODY_BYTES = 32 << 20


@dataclass(frozen=True)
class ServerSample:
    """One exposed sample: ``name`` as exposed (``vllm:prompt_tokens_total``,
    ``vllm:time_to_first_token_seconds_bucket``), ``labels`` as sorted ``(name, value)`` pairs
    (a histogram bucket's ``le`` among them), ``value`` as exposed (NaN kept)."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str) -> str | None:
        """The value of label ``key``, or None."""
        return next((v for k, v in self.labels if k == key), None)


@dataclass
class ScrapeLog:
    """The scrapes of one :class:`Scraper` run: ``scrapes`` as ``(t_ns, samples)`` for each
    successful scrape in time order (``t_ns``: Unix-epoch ns taken just before the request),
    ``errors`` the first :data:`MAX_ERRORS` distinct error texts of failed scrapes (``HTTP 404``,
    ``Connection refused``, …), ``url`` the metrics URL scraped, ``attempts`` all scrapes tried."""

    url: str
    scrapes: list[tuple[int, list[ServerSample]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    attempts: int = 0


def _one_line(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _families(text: str) -> list[ServerSample]:
    out: list[ServerSample] = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.append(ServerSample(s.name, tuple(sorted(s.labels.items())), float(s.value)))
    return out


def parse_metrics(text: str, source: str = "metrics") -> list[ServerSample]:
    """The samples of a Prometheus text exposition, in the order exposed.

    Raises :class:`LoadInputError` (``<source>: malformed Prometheus text ...``, one line, with
    the first offending line's number where it can be told) on text ``prometheus_client``
    rejects."""
    try:
        return _families(text)
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        where = ""
        for no, line in enumerate(text.splitlines(), 1):  # find the line: parse each one alone
            if not line.strip() or (line.startswith("#") and not line.startswith(("# TYPE", "# HELP"))):
                continue
            try:
                _families(line + "\n")
            except (ValueError, TypeError, IndexError, KeyError):
                where = f" at line {no} ({_one_line(line, 80)!r})"
                break
        detail = _one_line(str(exc)) or type(exc).__name__
        raise LoadInputError(source, f"malformed Prometheus text{where}: {detail}") from None


def metrics_url(url: str) -> str:
    """The ``/metrics`` URL of the server a load URL names.

    ``http://h:8000``, ``http://h:8000/v1`` and ``http://h:8000/v1/completions`` give
    ``http://h:8000/metrics``; a path before ``/v1`` is kept (``http://h/proxy/v1`` gives
    ``http://h/proxy/metrics``) and a URL that already ends in ``/metrics`` is returned as is.
    Raises :class:`LoadInputError` for a URL that is not http(s) with a host."""
    t = http_target(url)
    segs = [s for s in t.path.split("/") if s]
    if "v1" in segs:
        segs = segs[: segs.index("v1")]
    elif segs and segs[-1] == "metrics":
        segs = segs[:-1]
    return f"{t.origin()}/" + "".join(s + "/" for s in segs) + "metrics"


def _fetch(url: str, timeout_s: float) -> str:
    """GET ``url``; the body as text. Raises OSError/HTTPException, or ValueError for a non-200."""
    t = http_target(url)
    conn = t.connect(timeout_s)
    try:
        conn.request("GET", t.request_path(),
                     headers={"Accept": "text/plain"})
        resp = conn.getresponse()
        body = resp.read(MAX_BODY_BYTES + 1)
        if resp.status != 200:
            raise ValueError(f"HTTP {resp.status}")
        if len(body) > MAX_BODY_BYTES:
            raise ValueError(f"response over {MAX_BODY_BYTES >> 20} MiB")
        return body.decode("utf-8", "replace")
    finally:
        conn.close()


def _scrape(url: str, timeout_s: float) -> list[ServerSample]:
    """One scrape; raises ValueError with a one-line reason on any failure."""
    try:
        text = _fetch(url, timeout_s)
    except TimeoutError:
        raise ValueError(f"timed out after {timeout_s:g} s") from None
    except OSError as exc:
        raise ValueError(_one_line(exc.strerror or str(exc) or type(exc).__name__)) from None
    except http.client.HTTPException as exc:
        raise ValueError(_one_line(f"{type(exc).__name__}: {exc}")) from None
    try:
        return parse_metrics(text, url)
    except LoadInputError as exc:
        raise ValueError(exc.reason) from None


def probe(url: str, timeout_s: float = 2.0) -> bool:
    """Whether the server of load URL ``url`` answers ``GET /metrics`` with 200 and text that
    parses as Prometheus exposition (see :func:`metrics_url`)."""
    try:
        _scrape(metrics_url(url), timeout_s)
    except (ValueError, LoadInputError):
        return False
    return True


class Scraper:
    """Scrapes a server's ``/metrics`` every ``interval_s`` seconds from a daemon thread.

    ``url`` is the load URL (or the metrics URL itself, see :func:`metrics_url`); ``timeout_s``
    bounds each request (s). :meth:`start` scrapes at once and then every ``interval_s`` (the
    period is measured from scrape start to scrape start; a slow scrape delays the next one,
    scrapes never overlap); :meth:`stop` ends the thread, scrapes one last time and returns the
    :class:`ScrapeLog`. Scrape failures are noted in the log, never raised."""

    def __init__(self, url: str, interval_s: float = 0.5, timeout_s: float = 2.0) -> None:
        if not (interval_s > 0 and math.isfinite(interval_s)):
            raise LoadInputError(url, f"scrape interval must be > 0 s, got {interval_s:g}")
        if not (timeout_s > 0 and math.isfinite(timeout_s)):
            raise LoadInputError(url, f"scrape timeout must be > 0 s, got {timeout_s:g}")
        self.url = metrics_url(url)
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._log = ScrapeLog(self.url)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False

    @property
    def n_scrapes(self) -> int:
        """Successful scrapes so far."""
        with self._lock:
            return len(self._log.scrapes)

    @property
    def n_attempts(self) -> int:
        """Scrapes tried so far (successful or not)."""
        with self._lock:
            return self._log.attempts

    def scrape_once(self) -> None:
        """Scrape now (on the calling thread) and add the outcome to the log."""
        t_ns = time.time_ns()
        try:
            samples = _scrape(self.url, self.timeout_s)
        except ValueError as exc:
            with self._lock:
                self._log.attempts += 1
                text = str(exc)
                if text not in self._log.errors and len(self._log.errors) < MAX_ERRORS:
                    self._log.errors.append(text)
            return
        with self._lock:
            self._log.attempts += 1
            self._log.scrapes.append((t_ns, samples))

    def _run(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            self.scrape_once()
            next_t += self.interval_s
            now = time.monotonic()
            next_t = max(next_t, now)  # a scrape that ran over its slot: the next one starts now
            self._stop.wait(next_t - now)

    def start(self) -> Scraper:
        """Start scraping (the first scrape is made at once, on the thread). Returns self."""
        if self._thread is not None:
            raise RuntimeError("Scraper already started")
        self._thread = threading.Thread(target=self._run, name="tracekit-metrics-scraper", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> ScrapeLog:
        """Stop the thread, scrape one last time and return the log (the same log on a second call)."""
        if self._stopped:
            return self._log
        self._stop.set()
        if self._thread is not None:
            self._thread.join()  # each scrape is bounded by timeout_s
        self.scrape_once()
        self._stopped = True
        return self._log
