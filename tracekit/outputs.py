"""Writing output files safely: the one way every command writes a file a user named.

``tracekit export --perfetto``, ``report -o``, ``check --output`` and ``capture --out`` all go
through this module, so one rule holds for all of them:

* never a tracekit store: the store in use (after resolving symlinks), any DuckDB database (a
  file with ``DUCK`` at byte offset 8), or a store's write-ahead log (``<store>.wal``, existing or
  not: DuckDB would replay a foreign file as the log);
* never a directory (for a file output) and never anything that is not a regular file (a
  device such as ``/dev/null``, a fifo, a socket);
* an existing regular file is replaced only with ``--force``;
* symlinks are resolved before any of these checks, and the file they point to is what is
  written;
* writes are atomic: the data goes to a temporary file in the target's directory, which is
  renamed onto the target only once it is complete, and removed on any failure.

Every refusal is an :class:`OutputError`, printed by the CLI as one line
``error: <path>: <reason>`` with exit code 2.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from tracekit.errors import OutputError

#: DuckDB's file magic: these 4 bytes at byte offset 8 of every DuckDB database file.
DUCKDB_MAGIC = b"DUCK"
DUCKDB_MAGIC_OFFSET = 8

#: The ``--force`` help text shared by every command that writes an output file.
FORCE_HELP = ("Overwrite an existing output file. Never needed for a new file, and never enough to "
              "overwrite a tracekit store (or its .wal), a directory or a device/fifo/socket.")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: Read once at import (in the main thread): changing the umask to read it is not thread-safe.
_UMASK = _umask()

_STORE_REASON = "is a tracekit store; refusing to overwrite it"
_WAL_REASON = "is a tracekit store's write-ahead log; refusing to overwrite it"


def is_duckdb_file(path: str | Path) -> bool:
    """True if ``path`` is a regular file starting with DuckDB's header (``DUCK`` at offset 8).

    Never opens anything but a regular file (a fifo would block), and never raises."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return False
        with open(path, "rb") as fh:
            head = fh.read(DUCKDB_MAGIC_OFFSET + len(DUCKDB_MAGIC))
    except OSError:
        return False
    return head[DUCKDB_MAGIC_OFFSET:] == DUCKDB_MAGIC


def _store_in_use(store: str | Path | None) -> Path:
    if store is not None:
        return Path(store)
    return Path(os.environ.get("TRACEKIT_STORE") or "tracekit.duckdb")


def _resolve(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise OutputError(path, f"cannot resolve the path: {getattr(exc, 'strerror', None) or exc}") from None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _check_not_store(shown: Path, target: Path, store: Path) -> None:
    """Refuse ``target`` (resolved) when it is the store in use, a DuckDB file or a store's WAL."""
    store_res = _resolve(store)
    if target == store_res or _same_file(target, store_res):
        raise OutputError(shown, _STORE_REASON)
    if target.name.endswith(".wal"):
        base = target.with_name(target.name[: -len(".wal")])
        if base == store_res or is_duckdb_file(base):
            raise OutputError(shown, _WAL_REASON)


def check_output(path: str | Path, *, store: str | Path | None = None, force: bool = False,
                 make_parents: bool = False) -> Path:
    """Check that ``path`` may be written as an output file; return the file to write (``path``
    with every symlink resolved).

    ``store`` is the store the command uses (default: ``$TRACEKIT_STORE`` or
    ``./tracekit.duckdb``). Raises :class:`OutputError` for a store, a store's ``.wal``, any
    DuckDB file, a directory, a non-regular file, or an existing file when ``force`` is false.
    With ``make_parents`` a missing parent directory is not an error (the writer creates it)."""
    shown = Path(path)
    if not str(path):
        raise OutputError("''", "empty output path")
    target = _resolve(shown)
    _check_not_store(shown, target, _store_in_use(store))
    try:
        st = os.stat(target)
    except FileNotFoundError:
        parent = target.parent
        if not make_parents and not parent.is_dir():
            raise OutputError(shown, "cannot write: its directory does not exist" if not os.path.lexists(parent)
                              else "cannot write: its parent is not a directory") from None
        return target
    except OSError as exc:
        raise OutputError(shown, f"cannot write: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise OutputError(shown, "is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise OutputError(shown, "is not a regular file (a device, fifo or socket); refusing to replace it")
    if is_duckdb_file(target):
        raise OutputError(shown, _STORE_REASON)
    if not force:
        raise OutputError(shown, "exists; pass --force to overwrite it")
    return target


@contextmanager
def open_output(path: str | Path, *, store: str | Path | None = None, force: bool = False,
                binary: bool = False, make_parents: bool = False) -> Iterator[IO[Any]]:
    """Open an output file for writing, atomically: a context manager yielding a file object on a
    temporary file in the target's directory, renamed onto the target when the block ends without
    an exception and removed otherwise. Checks as :func:`check_output` first, and again just before
    the rename. A new file gets the usual permissions (0666 less the umask); a replaced one keeps
    its own.

    Raises :class:`OutputError` (one line) for a refused path or a failed write."""
    shown = Path(path)
    target = check_output(shown, store=store, force=force, make_parents=make_parents)
    try:
        if make_parents:
            target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise OutputError(shown, f"cannot write: {exc.strerror or exc}") from None
    tmp = Path(tmp_name)
    try:
        fh: IO[Any] = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")
        with fh:
            yield fh
        # the target may have changed while the output was produced (a store created there, a
        # file appearing): check again, then replace
        check_output(shown, store=store, force=force, make_parents=make_parents)
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except FileNotFoundError:
            mode = 0o666 & ~_UMASK
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OutputError(shown, f"cannot write: {exc.strerror or exc}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_output(path: str | Path, data: str | bytes, *, store: str | Path | None = None, force: bool = False,
                 make_parents: bool = False) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` atomically under the rules of :func:`open_output`;
    return the file written (``path`` with symlinks resolved)."""
    target = check_output(path, store=store, force=force, make_parents=make_parents)
    with open_output(path, store=store, force=force, binary=isinstance(data, bytes),
                     make_parents=make_parents) as fh:
        fh.write(data)
    return target


def prepare_output_dir(path: str | Path, *, store: str | Path | None = None, force: bool = False,
                       marker: str) -> bool:
    """Make ``path`` ready to receive a new set of output files (``capture --out``); return True
    if the directory was created here (it did not exist).

    Allowed: a missing path (created, with its parents) and an empty directory. A non-empty
    directory is refused, unless ``force`` is given and it is a previous output directory of the
    same kind (it holds ``marker``, e.g. ``tracekit-capture.json``) and holds no DuckDB file: then
    it is emptied. Never a store, a file, a device, or a directory that holds the store in use.
    Symlinks are resolved first."""
    shown = Path(path)
    target = _resolve(shown)
    store_res = _resolve(_store_in_use(store))
    _check_not_store(shown, target, store_res)
    if target in store_res.parents:
        raise OutputError(shown, f"holds the store {store_res}; choose another directory for the traces")
    entries = _existing_dir_entries(shown, target)
    if entries is None:
        return True
    if entries:
        _empty_previous_output(shown, target, entries, force=force, marker=marker)
    return False


def _existing_dir_entries(shown: Path, target: Path) -> list[Path] | None:
    """The entries of directory ``target``; None when it did not exist (it is created here).
    :class:`OutputError` when it is not a directory or cannot be used."""
    try:
        st = os.stat(target)
    except FileNotFoundError:
        try:
            target.mkdir(parents=True)
        except OSError as exc:
            raise OutputError(shown, f"cannot create the directory: {exc.strerror or exc}") from None
        return None
    except OSError as exc:
        raise OutputError(shown, f"cannot use the directory: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        if is_duckdb_file(target):
            raise OutputError(shown, _STORE_REASON)
        if stat.S_ISREG(st.st_mode):
            raise OutputError(shown, "is a file, not a directory; refusing to replace it")
        raise OutputError(shown, "is not a directory (a device, fifo or socket); refusing to use it")
    try:
        return list(target.iterdir())
    except OSError as exc:
        raise OutputError(shown, f"cannot use the directory: {exc.strerror or exc}") from None


def _empty_previous_output(shown: Path, target: Path, entries: list[Path], *, force: bool, marker: str) -> None:
    """Empty a non-empty output directory: only with ``force``, only a previous output of the
    same kind (it holds ``marker``), never one that holds a DuckDB file."""
    if not force:
        raise OutputError(shown, "output directory is not empty (traces of another capture would mix in); "
                          "pass --force to replace a previous capture's directory")
    if not (target / marker).is_file():
        raise OutputError(shown, f"output directory is not empty and is not a previous capture's (no {marker}); "
                          "refusing to replace it, even with --force")
    for root, _dirs, files in os.walk(target):  # os.walk does not follow symlinks
        for f in files:
            if is_duckdb_file(os.path.join(root, f)) and not os.path.islink(os.path.join(root, f)):
                raise OutputError(shown, f"holds a DuckDB database ({os.path.join(root, f)}); refusing to replace it")
    try:
        for entry in entries:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    except OSError as exc:
        raise OutputError(shown, f"cannot empty the directory: {exc.strerror or exc}") from None
