"""``benchmarks/harness.py``: a measured child's peak RSS is its own ``VmHWM`` whichever way the
Python command is started (``-c``, a script, a console script with a Python shebang), even when it
leaves through ``os._exit``; its exit status is kept; other commands fall back to ``ru_maxrss``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import harness  # benchmarks/ (on the path through conftest.py)
import pytest

needs_proc = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="VmHWM is read from Linux /proc")

ALLOCATED = 300 * 2**20  # bytes the child touches, page by page
TOUCH = f"b = bytearray({ALLOCATED})\nfor i in range(0, len(b), 4096):\n    b[i] = 1\n"


def _measure(cmd: list[str], tmp_path: Path) -> harness.Sample:
    with open(tmp_path / "log", "wb") as log:
        return harness.run_measured(cmd, log, 300, vmhwm_dir=tmp_path)


@needs_proc
@pytest.mark.parametrize(("form", "leave", "code"), [
    ("-c", "import os\nos._exit(3)\n", 3),
    ("script", "import sys\nsys.exit(5)\n", 5),
    ("console script", "", 0),
])
def test_peak_rss_is_the_childs_own_vmhwm(tmp_path: Path, form: str, leave: str, code: int) -> None:
    body = TOUCH + leave
    if form == "-c":
        cmd = [sys.executable, "-c", body]
    else:
        script = tmp_path / "child.py"
        script.write_text((f"#!{sys.executable}\n" if form == "console script" else "") + body)
        if form == "console script":
            script.chmod(0o755)
            cmd = [str(script)]
        else:
            cmd = [sys.executable, str(script)]
    sample = _measure(cmd, tmp_path)
    assert sample.returncode == code, (tmp_path / "log").read_text()
    assert sample.extra["rss_source"] == "VmHWM"
    assert sample.maxrss_kb * 1024 >= ALLOCATED  # the child's own pages, counted by the child


@needs_proc
def test_the_child_sees_its_arguments_and_name(tmp_path: Path) -> None:
    out = tmp_path / "seen"
    cmd = [sys.executable, "-c", f"import sys\nopen({str(out)!r}, 'w').write(repr((__name__, sys.argv)))", "a", "b"]
    assert _measure(cmd, tmp_path).returncode == 0
    assert out.read_text() == repr(("__main__", ["-c", "a", "b"]))


def test_a_command_that_is_not_python_falls_back_to_ru_maxrss(tmp_path: Path) -> None:
    true = "/bin/true" if os.path.exists("/bin/true") else "/usr/bin/true"
    sample = _measure([true], tmp_path)
    assert sample.returncode == 0
    assert sample.extra["rss_source"] == "ru_maxrss"
    assert harness.vmhwm_command([true], tmp_path / "r") is None
