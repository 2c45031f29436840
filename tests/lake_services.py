"""Real services for the lake tests, started on 127.0.0.1 and stopped by the tests themselves.

* :func:`postgres` — a throw-away PostgreSQL cluster (Debian's ``postgresql`` package: ``initdb``
  + ``pg_ctl`` on a free port, trust authentication, data in a temp directory), as root through
  ``runuser -u postgres`` since PostgreSQL refuses to run as root.
* :func:`s3` — moto's S3-compatible server (``moto_server`` from PyPI) on a free port.

Each yields what a test needs, or skips with the reason when the service cannot be had here.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for root in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (root / name).exists():
            return str(root / name)
    return None


def _as_postgres(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


@contextmanager
def postgres(database: str = "lake") -> Iterator[tuple[str, int]]:
    """A PostgreSQL cluster with ``database`` created; yields (host, port)."""
    initdb, pg_ctl, createdb = _pg_bin("initdb"), _pg_bin("pg_ctl"), _pg_bin("createdb")
    if not (initdb and pg_ctl and createdb):
        pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql); .ci/run installs it")
    if os.geteuid() == 0 and not shutil.which("runuser"):
        pytest.skip("running as root without runuser: cannot start PostgreSQL as its own user")
    base = Path(tempfile.mkdtemp(prefix="tracekit-pg-"))
    data = base / "data"
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
    port = free_port()
    log = base / "log"
    try:
        subprocess.run(_as_postgres([initdb, "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"]),
                       check=True, capture_output=True, timeout=120)
        subprocess.run(_as_postgres([pg_ctl, "-D", str(data), "-l", str(log), "-w", "-t", "120", "-o",
                                     f"-p {port} -c listen_addresses=127.0.0.1 -k {base} -c fsync=off",
                                     "start"]), check=True, capture_output=True, timeout=180)
        subprocess.run(_as_postgres([createdb, "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", database]),
                       check=True, capture_output=True, timeout=60)
        yield "127.0.0.1", port
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"PostgreSQL did not start: {exc.stderr.decode(errors='replace')[-500:]}")
    finally:
        subprocess.run(_as_postgres([pg_ctl, "-D", str(data), "-m", "immediate", "stop"]),
                       check=False, capture_output=True, timeout=120)
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def s3(bucket: str = "lake") -> Iterator[dict[str, str]]:
    """moto's S3 server with ``bucket`` created; yields the ``AWS_*`` environment to reach it."""
    server = shutil.which("moto_server") or str(Path(sys.executable).with_name("moto_server"))
    if not Path(server).exists():
        pytest.skip("moto's S3 server is not installed (pip install 'moto[server]'; tracekit[lake-test] has it)")
    port = free_port()
    proc = subprocess.Popen([server, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
    try:
        import urllib.request

        for _ in range(600):  # wait for it to listen: no timing margin, a bounded poll
            try:
                urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/{bucket}", method="PUT"),
                                       timeout=5)
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail("moto_server exited at start")
                time.sleep(0.1)
        else:
            pytest.fail("moto_server did not answer within 60 s")
        yield env
    finally:
        proc.terminate()
        proc.wait(timeout=30)
