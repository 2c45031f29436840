"""The CLI's typed parameters: a value the parser refuses is one ``error:`` line and exit 2, with
nothing written; and ``tracekit capture``'s backends are found by name in one registry."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tests.helpers import run_cli
from tracekit.cli.params import option_group
from tracekit.collectors import capture as capture_api
from tracekit.collectors.capture_backends import (
    COMMAND_BACKENDS,
    REGISTRY,
    CaptureBackend,
    backend_for,
    get_backend,
)
from tracekit.collectors.capture_backends.spec import SERVER_TRACE_DIR_ENV, Backend
from tracekit.errors import CaptureError

#: (arguments, the whole error line). Every command is given a store that does not exist: a
#: refusal by the parser happens before it would be looked at.
REFUSED: list[tuple[list[str], str]] = [
    (["runs", "--format", "xml"], "error: --format xml: expected table, csv or json"),
    (["query", "SELECT 1", "-f", "yaml"], "error: --format yaml: expected table, csv or json"),
    (["compare", "a", "b", "--format", "md"], "error: --format md: expected table, csv or json"),
    (["analyze", "r1", "--format", "csv"], "error: --format csv: expected table, json or markdown"),
    (["analyze", "r1", "--model", "qwen3-8b", "--tp", "0"], "error: --tp 0: expected a positive number of ranks"),
    (["check", "--candidate", "a", "--baseline", "b", "--format", "table"],
     "error: --format table: expected markdown or json"),
    (["check", "--candidate", "a", "--baseline", "b", "--post", "github", "--post", "email"],
     "error: --post email: expected github or slack"),
    (["check", "--candidate", "a", "--baseline", "b", "--post-on", "never"],
     "error: --post-on never: expected always or regression"),
    (["dashboard", "--port", "0"], "error: --port 0: expected 1..65535"),
    (["dashboard", "--port", "65536"], "error: --port 65536: expected 1..65535"),
    (["capture", "--backend", "ncu", "--", "true"], "error: --backend ncu: expected torch, jax, rocprof or nsys"),
    (["capture", "--server", "tgi", "http://127.0.0.1:1", "--duration", "1"],
     "error: --server tgi: expected vllm or sglang"),
    (["capture", "--endpoint", "embed", "--load", "http://127.0.0.1:1", "--duration", "1", "--backend", "torch",
      "--", "true"], "error: --endpoint embed: expected completions or chat"),
    # Click's own refusals, one line too
    (["capture", "--duration", "soon", "--", "true"], "error: --duration: 'soon' is not a valid float."),
    (["runs", "--bogus"], "error: No such option: --bogus"),
    (["ingest"], "error: Missing argument 'PATH...'."),
]


@pytest.mark.parametrize(("args", "line"), REFUSED, ids=[" ".join(a[:3]) for a, _ in REFUSED])
def test_refused_value_is_one_line(tmp_path: Path, args: list[str], line: str) -> None:
    store = tmp_path / "none.duckdb"
    where = args.index("--") if "--" in args else len(args)
    r = run_cli(*args[:where], "--store", str(store), *args[where:], env={"HOME": str(tmp_path)})
    assert (r.returncode, r.stderr.strip().splitlines()) == (2, [line]), r.stderr
    assert r.stdout == ""
    assert not store.exists()
    assert not list(tmp_path.glob("tracekit-capture-*"))


def test_accepted_choices_pass_the_parser(tmp_path: Path) -> None:
    """Each accepted word gets past the parser: the error is then the missing store's."""
    store = tmp_path / "none.duckdb"
    for fmt in ("table", "csv", "json"):
        r = run_cli("runs", "--format", fmt, "--store", str(store))
        assert r.returncode == 2 and r.stderr.startswith(f"error: {store}: "), r.stderr


def test_registry_names_its_backends() -> None:
    assert set(COMMAND_BACKENDS) <= set(REGISTRY)
    assert set(typing.get_args(Backend)) == set(COMMAND_BACKENDS)  # CaptureSpec.backend's type
    for name in REGISTRY:
        backend = get_backend(name)
        assert isinstance(backend, CaptureBackend) and backend.name == name
        assert backend.options <= {"warmup_steps", "counters"}
    assert "warmup_steps" in get_backend("torch").options and "counters" in get_backend("rocprof").options


def test_backend_for_each_source() -> None:
    spec = capture_api.CaptureSpec
    assert backend_for(spec(command=["x"], backend="jax")).name == "jax"
    assert backend_for(spec(command=["x"], backend="rocprof")).name == "rocprof"
    assert backend_for(spec(command=["x"], backend="nsys")).name == "nsys"
    assert backend_for(spec(attach="h:1", duration_s=1)).name == "attach"
    for kind in SERVER_TRACE_DIR_ENV:
        assert backend_for(spec(server=kind, server_url="http://h", duration_s=1)).name == "server"  # type: ignore[arg-type]


@pytest.mark.parametrize(("spec", "where", "reason"), [
    (capture_api.CaptureSpec(command=["true"], backend="nope"), "--backend",  # type: ignore[arg-type]
     "unknown backend 'nope' (known: torch, jax, rocprof, nsys)"),
    (capture_api.CaptureSpec(command=["true"], backend="jax", warmup_steps=2), "--warmup-steps",
     "counts nn.Module forwards: only with --backend torch"),
    (capture_api.CaptureSpec(command=["true"], backend="torch", counters="stalls"), "--counters",
     "hardware counter presets need --backend rocprof"),
    (capture_api.CaptureSpec(command=["true"], backend="rocprof", counters="nope"), "--counters",
     "unknown preset 'nope' (known: stalls, memory, roofline)"),
    (capture_api.CaptureSpec(command=["true"], backend="rocprof", counters="memory", duration_s=1), "--counters",
     "preset 'memory' needs 2 passes"),
    (capture_api.CaptureSpec(attach="nohost", duration_s=1), "nohost", "expected HOST:PORT of a profiler server"),
    (capture_api.CaptureSpec(server="vllm", server_url="ftp://h", duration_s=1), "ftp://h",
     "expected the server's http(s) URL"),
    (capture_api.CaptureSpec(command=["tracekit-no-such-command"], backend="torch"), "tracekit-no-such-command",
     "command not found"),
])
def test_spec_refused_before_anything_is_created(tmp_path: Path, spec: capture_api.CaptureSpec, where: str,
                                                 reason: str) -> None:
    out = tmp_path / "out"
    spec.out_dir = out
    with pytest.raises(CaptureError) as info:
        capture_api.capture(spec)
    assert str(info.value).startswith(f"{where}: {reason}"), str(info.value)
    assert not out.exists()


def test_capture_module_keeps_its_names() -> None:
    """What callers import from tracekit.collectors.capture (docs/capture.md, the CLI, tests)."""
    for name in ("capture", "capture_and_ingest", "CaptureSpec", "CaptureStatus", "CaptureResult", "rocprof_command",
                 "terminate_children", "COUNTER_PRESETS", "SERVER_TRACE_DIR_ENV", "CAPTURE_FILE"):
        assert hasattr(capture_api, name), name
    cmd = capture_api.rocprof_command(capture_api.CaptureSpec(command=["app"], backend="rocprof",
                                                              counters="stalls"), Path("/o"))
    assert cmd[:4] == ["rocprofv3", "--kernel-trace", "--memory-copy-trace", "--hip-runtime-trace"]
    assert cmd[cmd.index("--pmc") + 1:cmd.index("--")] == capture_api.COUNTER_PRESETS["stalls"][0]
    assert cmd[-2:] == ["--", "app"]


class Window(typing.NamedTuple):
    """An option group for the test below."""

    start: typing.Annotated[float, typer.Option(help="Window start, s.")] = 0.0
    length: typing.Annotated[float | None, typer.Option("--for", help="Window length, s.")] = None


def test_option_group_stands_for_its_options_in_place() -> None:
    """A NamedTuple's typed options stand on the command line where its parameter is, and the
    command gets them as one value (what ingest, analyze and capture do with --model ...)."""
    got: list[tuple[str, Window, bool]] = []
    app = typer.Typer()

    @app.command()
    @option_group("window", Window)
    def show(name: str, window: Window = Window(), verbose: bool = False) -> None:  # noqa: B008
        """Show a window."""
        got.append((name, window, verbose))

    @app.command()
    def other() -> None:
        """Another command, so that `show` is a subcommand."""

    runner = CliRunner()
    result = runner.invoke(app, ["show", "x", "--for", "2.5", "--verbose"])
    assert result.exit_code == 0, result.output
    assert got == [("x", Window(0.0, 2.5), True)]
    runner.invoke(app, ["show", "y"])
    assert got[-1] == ("y", Window(), False)
    help_text = runner.invoke(app, ["show", "--help"], env={"COLUMNS": "200"}).output
    assert help_text.index("--start") < help_text.index("--for") < help_text.index("--verbose")
    assert "Window length, s." in help_text and "Show a window." in help_text


@pytest.mark.parametrize(("command", "before"), [("ingest", "--analyze"), ("analyze", "--lengths"),
                                                ("capture", "--json")])
def test_model_options_keep_their_place(command: str, before: str) -> None:
    """--model, --tp, --weights and --kv-cache close the option list of each command that takes them,
    after the command's own options, as before they were declared once."""
    out = run_cli(command, "--help", env={"COLUMNS": "200"}).stdout
    options = re.findall(r"^[│|]\s+(--[a-z-]+)", out, flags=re.MULTILINE)
    assert options[-6:] == [before, "--model", "--tp", "--weights", "--kv-cache", "--help"]
