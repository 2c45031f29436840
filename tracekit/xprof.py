"""Opening an XPlane run in XProf (``tracekit open RUN --xprof``, the dashboard's Run page link):
XProf's trace viewer, memory profile, HLO graphs and op profile go deeper on TPU than tracekit
tries to, so tracekit serves the run's own profile files to it instead of re-implementing them.

XProf (``pip install 'tracekit[xprof]'``) reads a *log directory* laid out as TensorBoard's
profile plugin writes it: ``<logdir>/plugins/profile/<session>/<host>.xplane.pb``. A run ingested
from such a session is served from its own log directory; a run from loose ``.xplane.pb`` files
gets a private log directory (in ``$TRACEKIT_TMPDIR``) holding links to them, one session named
after the run (a ``.xplane.pb.gz`` is decompressed there: XProf reads plain files only).

XProf's own ``xprof server`` binds every interface and starts a gRPC worker on 0.0.0.0; tracekit
runs the same WSGI app in a child process bound to 127.0.0.1 only, without the worker (one
process converts on its own), on a free port unless one is given.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tracekit.errors import ConfigError, StoreError
from tracekit.limits import temp_dir
from tracekit.parsers._io import iter_decompressed
from tracekit.store import open_store, resolve_run_id, resolve_store

__all__ = ["XProfServer", "has_xprof", "profile_logdir", "serve", "start_xprof"]

#: Seconds XProf may take to answer its first request (imports and plugin load: 3–6 s here).
START_TIMEOUT_S = 120.0
INSTALL = "pip install 'tracekit[xprof]'"


def has_xprof() -> bool:
    """Whether the ``xprof`` package (the extra ``tracekit[xprof]``) is importable."""
    import importlib.util

    try:
        return importlib.util.find_spec("xprof") is not None
    except (ImportError, ValueError):  # a broken or blocked install
        return False


def _xplane_files(run_id: str, store: str | Path | None) -> tuple[str, list[Path]]:
    """(the full run id, its XPlane files, one per rank); StoreError for a run of another format."""
    path = resolve_store(store)
    with open_store(path, read_only=True) as con:
        run_id = resolve_run_id(con, run_id, path)
        fmt = con.execute("SELECT format FROM runs WHERE run_id = ?", [run_id]).fetchall()[0][0]
        files = [Path(r[0]) for r in con.execute(
            "SELECT DISTINCT path FROM ranks WHERE run_id = ? AND path IS NOT NULL ORDER BY 1", [run_id]).fetchall()]
    if fmt != "xplane":
        raise StoreError(run_id, f"XProf opens XPlane runs; this run is {fmt}")
    if not files:
        raise StoreError(run_id, "the run has no profile file stored")
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise StoreError(run_id, f"the run's profile file is gone: {missing[0]}")
    return run_id, files


def profile_logdir(run_id: str, store: str | Path | None = None, scratch: Path | None = None) -> tuple[Path, str]:
    """(an XProf log directory holding the run's XPlane files, the session name): the capture's own
    log directory when its files lie in ``<logdir>/plugins/profile/<session>/``, else one made in
    ``scratch`` (default: a new directory in ``$TRACEKIT_TMPDIR``) with links to the files."""
    run_id, files = _xplane_files(run_id, store)
    parents = {f.parent for f in files}
    if len(parents) == 1 and not any(f.name.endswith(".gz") for f in files):
        session = next(iter(parents))
        if session.parent.name == "profile" and session.parent.parent.name == "plugins":
            return session.parent.parent.parent, session.name
    root = scratch if scratch is not None else Path(tempfile.mkdtemp(prefix="tracekit-xprof-", dir=temp_dir()))
    session_dir = root / "plugins" / "profile" / run_id
    session_dir.mkdir(parents=True, exist_ok=True)
    for i, f in enumerate(files):
        host = f.name.split(".xplane.pb")[0] or f"rank{i}"
        target = session_dir / f"{host}.xplane.pb"
        if target.exists() or target.is_symlink():
            continue
        if f.name.endswith(".gz"):
            with target.open("wb") as out:
                for block in iter_decompressed(f, strict=True):
                    out.write(block)
        else:
            target.symlink_to(f.resolve())
    return root, run_id


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class XProfServer:
    """A running XProf child process serving one log directory on 127.0.0.1."""

    url: str  #: the session's page, e.g. ``http://127.0.0.1:PORT/?run=SESSION``
    root_url: str  #: ``http://127.0.0.1:PORT/``
    logdir: Path
    process: subprocess.Popen[bytes]
    scratch: Path | None = None  #: a log directory tracekit made (removed by :meth:`stop`)
    stopped: bool = field(default=False)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s) and remove a log directory tracekit made."""
        if not self.stopped:
            self.stopped = True
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            if self.scratch is not None:
                shutil.rmtree(self.scratch, ignore_errors=True)


def start_xprof(run_id: str, store: str | Path | None = None, port: int | None = None,
                timeout_s: float = START_TIMEOUT_S) -> XProfServer:
    """Start XProf on the run's profile directory, bound to 127.0.0.1 (a free port unless
    ``port``), and wait until it answers. ConfigError without the ``xprof`` package; StoreError
    for a run that is not XPlane or whose files are gone."""
    if not has_xprof():
        raise ConfigError("xprof", f"XProf is not installed: {INSTALL}")
    made = None
    logdir, session = profile_logdir(run_id, store)
    if logdir.name.startswith("tracekit-xprof-"):
        made = logdir
    port = port or _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from tracekit.xprof import serve; serve(sys.argv[1], int(sys.argv[2]))",
         str(logdir), str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    root = f"http://127.0.0.1:{port}/"
    server = XProfServer(f"{root}?run={session}", root, logdir, proc, made)
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            err = (proc.stderr.read().decode("utf-8", "replace") if proc.stderr else "").strip().splitlines()
            server.stop()
            raise ConfigError("xprof", f"XProf exited with code {proc.returncode}" + (f": {err[-1]}" if err else ""))
        try:
            with urllib.request.urlopen(root, timeout=2) as resp:
                if resp.status == 200:
                    break
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise ConfigError("xprof", f"XProf did not answer on {root} within {timeout_s:g} s")
        time.sleep(0.2)
    if proc.stderr is not None:  # XProf logs a line per conversion: never let the pipe fill up
        proc.stderr.close()
    return server


def serve(logdir: str, port: int) -> None:
    """In the child process: XProf's WSGI app on ``logdir``, bound to 127.0.0.1:``port`` (the
    body of ``xprof.server._launch_server`` without the 0.0.0.0 bindings). Blocks."""
    import importlib
    import os

    # xprof ships no type stubs: imported by name
    wsgi = importlib.import_module("cheroot.wsgi")
    server = importlib.import_module("xprof.server")
    loader = importlib.import_module("xprof.profile_plugin_loader")
    tb_context = importlib.import_module("xprof.standalone.base_plugin").TBContext
    provider = importlib.import_module("xprof.standalone.plugin_event_multiplexer").DataProvider

    context = tb_context(logdir, provider(logdir), tb_context.Flags(False))
    context.hide_capture_profile_button = True
    context.enable_tab_name_label = False
    context.src_prefix = None
    plugin = loader.ProfilePluginLoader().load(context)
    httpd = wsgi.Server(("127.0.0.1", port), server.make_wsgi_app(plugin))
    httpd.prepare()  # binds: a busy port fails here, with its message on stderr
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # serving: its conversion logs are not the parent's concern
    try:
        httpd.serve()
    except KeyboardInterrupt:
        httpd.stop()

