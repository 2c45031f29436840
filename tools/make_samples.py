#!/usr/bin/env python
"""Regenerate the bundled CPU sample traces.

Run from the repository root::

    python tools/make_samples.py

It builds a tiny decoder-only transformer in plain torch (random, seeded
weights; nothing is downloaded), runs one batched greedy generation on the CPU
-- a prefill of the prompt followed by KV-cached decode steps -- and captures it
with :func:`tracekit.collectors.torch_profile`. Phases are annotated with
``record_function("prefill")`` / ``record_function("decode_step_<i>")`` and each
phase ends with ``capture.step()`` (giving ``ProfilerStep#N`` annotations).

Output: ``sample_traces/cpu_tiny_decoder_prefill_decode.pt.trace.json.gz``.
The trace is a real capture, so timings differ from run to run and machine to
machine; the operator structure, shapes and FLOP counts are deterministic.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import math
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
try:
    import tracekit.collectors  # noqa: F401
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(REPO_ROOT))

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tracekit.collectors import torch_profile

OUTPUT = HERE.parent / "sample_traces" / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"
SEED = 0
BATCH = 2
PROMPT_LEN = 48
DECODE_STEPS = 16


@dataclass(frozen=True)
class Config:
    vocab_size: int = 512
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int = 384  # SwiGLU hidden size
    max_seq_len: int = 128
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(cfg: Config) -> tuple[Tensor, Tensor]:
    """cos/sin tables of shape [max_seq_len, head_dim // 2]."""
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2).float() / cfg.head_dim))
    angles = torch.outer(torch.arange(cfg.max_seq_len).float(), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (x[..., :half], x[..., half:]); x: [B, H, T, Dh], cos/sin: [T, Dh/2]."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class KVCache:
    """Preallocated per-layer key/value buffers of shape [B, H, max_seq_len, Dh]."""

    def __init__(self, cfg: Config, batch: int) -> None:
        shape = (batch, cfg.n_heads, cfg.max_seq_len, cfg.head_dim)
        self.k = [torch.zeros(shape) for _ in range(cfg.n_layers)]
        self.v = [torch.zeros(shape) for _ in range(cfg.n_layers)]
        self.length = 0

    def update(self, layer: int, pos: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        t = k.shape[2]
        self.k[layer][:, :, pos : pos + t] = k
        self.v[layer][:, :, pos : pos + t] = v
        return self.k[layer][:, :, : pos + t], self.v[layer][:, :, : pos + t]


class Attention(nn.Module):
    def __init__(self, cfg: Config, layer: int) -> None:
        super().__init__()
        self.cfg, self.layer = cfg, layer
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=True)  # -> aten::addmm
        self.o_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)  # -> aten::mm

    def forward(self, x: Tensor, cache: KVCache, pos: int, cos: Tensor, sin: Tensor) -> Tensor:
        b, t, _ = x.shape
        h, dh = self.cfg.n_heads, self.cfg.head_dim
        q, k, v = self.qkv(x).view(b, t, 3, h, dh).permute(2, 0, 3, 1, 4).unbind(0)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k_all, v_all = cache.update(self.layer, pos, k, v)
        # Explicit attention (aten::matmul -> aten::bmm) so FLOPs are recorded.
        scores = torch.matmul(q, k_all.transpose(-2, -1)) / math.sqrt(dh)
        if t > 1:  # causal mask for the prefill; a decode token sees the whole cache
            s = k_all.shape[2]
            mask = torch.ones(t, s, dtype=torch.bool).tril(diagonal=s - t)
            scores = scores.masked_fill(~mask, float("-inf"))
        out = torch.matmul(scores.softmax(dim=-1), v_all)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, h * dh))


class SwiGLU(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.gate = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.up = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, cfg: Config, layer: int) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg, layer)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = SwiGLU(cfg)

    def forward(self, x: Tensor, cache: KVCache, pos: int, cos: Tensor, sin: Tensor) -> Tensor:
        x = x + self.attn(self.attn_norm(x), cache, pos, cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class TinyDecoder(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, tokens: Tensor, cache: KVCache) -> Tensor:
        """tokens: [B, T] -> logits of the last position, [B, vocab]."""
        pos, t = cache.length, tokens.shape[1]
        cos, sin = self.rope_cos[pos : pos + t], self.rope_sin[pos : pos + t]
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, cache, pos, cos, sin)
        cache.length += t
        return self.lm_head(self.norm(x[:, -1]))


def generate(model: TinyDecoder, prompt: Tensor, steps: int, capture=None) -> Tensor:
    """Greedy generation: one prefill of ``prompt`` then ``steps`` decode steps."""
    cache = KVCache(model.cfg, prompt.shape[0])
    with torch.profiler.record_function("prefill"):
        next_tok = model(prompt, cache).argmax(-1, keepdim=True)
    if capture is not None:
        capture.step()
    out = [next_tok]
    for i in range(steps):
        with torch.profiler.record_function(f"decode_step_{i}"):
            next_tok = model(next_tok, cache).argmax(-1, keepdim=True)
        out.append(next_tok)
        if capture is not None:
            capture.step()
    return torch.cat(out, dim=1)


def summarize(path: Path) -> collections.Counter:
    with gzip.open(path, "rt") as f:
        trace = json.load(f)
    return collections.Counter(e.get("cat", "<none>") for e in trace["traceEvents"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Re-capture the bundled CPU sample trace.")
    parser.add_argument("--output", type=Path, default=OUTPUT, help=f"where to write it [default: sample_traces/{OUTPUT.name}]")
    output: Path = parser.parse_args(argv).output.resolve()
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    cfg = Config()
    assert PROMPT_LEN + DECODE_STEPS + 1 <= cfg.max_seq_len
    model = TinyDecoder(cfg).eval()
    prompt = torch.randint(0, cfg.vocab_size, (BATCH, PROMPT_LEN))

    with torch.inference_mode():
        generate(model, prompt, DECODE_STEPS)  # warm-up, not captured
        with tempfile.TemporaryDirectory() as tmp:
            with torch_profile(tmp, activities="auto", with_stack=False) as cap:
                tokens = generate(model, prompt, DECODE_STEPS, capture=cap)
            assert cap.path is not None
            shutil.move(str(cap.path), output)

    counts = summarize(output)
    print(f"wrote {output} ({output.stat().st_size} bytes, gzip)")
    print(f"torch {torch.__version__}; generated tokens shape {tuple(tokens.shape)}")
    print(f"{sum(counts.values())} trace events: " + ", ".join(f"{k}={v}" for k, v in counts.most_common()))


if __name__ == "__main__":
    main()
