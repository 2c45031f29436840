#!/usr/bin/env python3
"""Re-capture ``cpu_torch_compile_recompile.pt.trace.json.gz``: torch.compile compiling, then
recompiling on a new input shape, recorded by the PyTorch profiler on CPU.

A two-layer MLP is compiled with ``torch.compile(dynamic=False)`` and called with batch sizes
8, 8, 16, 16 under ``tracekit.collectors.torch_profile``, one ``ProfilerStep`` per call: the first
call compiles (compile id 0/0), the third recompiles for the new batch size (0/1), the others hit
the cache. The capture shows dynamo's compile spans (``entire_frame_compile``,
``backend_compile``, ``inductor_compile``, …), their ``compile_id=…`` markers, and the
``Torch-Compiled Region: 0/N`` executions. Needs torch and a C++ compiler (Inductor's CPU backend).

Usage: ``python tools/make_torch_compile_sample.py [--output PATH]``
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tracekit.collectors import torch_profile

OUTPUT = HERE.parent / "sample_traces" / "cpu_torch_compile_recompile.pt.trace.json.gz"
BATCHES = (8, 8, 16, 16)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT, help=f"where to write it [default: sample_traces/{OUTPUT.name}]")
    output: Path = parser.parse_args(argv).output.resolve()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 64)).eval()
    compiled = torch.compile(model, dynamic=False)
    with torch.inference_mode(), tempfile.TemporaryDirectory() as tmp:
        with torch_profile(tmp, activities="cpu", with_stack=False) as cap:
            for batch in BATCHES:
                compiled(torch.randn(batch, 64))
                cap.step()
        assert cap.path is not None
        shutil.move(str(cap.path), output)
    print(f"wrote {output} ({output.stat().st_size} bytes); torch {torch.__version__}; batches {BATCHES}")


if __name__ == "__main__":
    main()
