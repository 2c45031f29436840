#!/usr/bin/env python
"""Capture a real JAX/XLA CPU profile (``.xplane.pb``) of a tiny decode server.

Run from the repository root::

    python tools/make_jax_sample.py          # -> sample_traces/jax_cpu_decode_recompile.xplane.pb.gz
    python tools/make_jax_sample.py --python-tracer --xla-default-codegen \
        --output /tmp/tracekit-bench/jax_cpu_pytracer.xplane.pb   # ~0.84 M events, ~14.5 MB

It builds a tiny decoder-only transformer in plain :mod:`jax.numpy` (random
weights from a fixed PRNG key; nothing is downloaded) with two ``@jax.jit``
entry points, ``prefill`` and ``decode_step``, and serves a fixed schedule of
"requests" under :func:`jax.profiler.trace`:

* **unbucketed** requests run ``prefill`` on the prompt at its real length, so
  every new prompt length compiles a new ``prefill`` variant (compile churn);
* **bucketed** requests pad the prompt up to the next bucket in
  :data:`BUCKETS` and pass the real length as a traced scalar, so only one
  variant per bucket is compiled, at the price of padded (wasted) positions;
* every request then runs :data:`DECODE_STEPS` ``decode_step`` calls on the
  KV cache; ``decode_step`` compiles once per batch size.

Annotations written into the trace (host thread ``python``)::

    request<i>_<mode>_b<batch>                 one per request (mode: unbucketed|bucketed)
      prefill_len<n>_T<T>                       n = real prompt length, T = compiled length
      decode  (StepTraceAnnotation, step_num)   one per decode step, numbered globally

so an analyzer can compare real vs padded lengths (``n`` vs ``T``) and tie the
``PjitFunction(prefill)`` / ``backend_compile_and_load`` events to the request
that caused them.

The ``<host>.xplane.pb`` that :mod:`jax.profiler` writes is copied to
``--output`` (gzip-compressed when the name ends in ``.gz``). Two settings keep
the bundled file small (~0.3 MB gzipped instead of ~0.5 MB) without changing
its structure:

* the Python tracer is off (``ProfileOptions.python_tracer_level = 0``;
  ``--python-tracer`` turns it on: ~0.84 M instead of ~30 k events for the
  default schedule, almost all of them ``$file.py:line function`` events);
* XLA's CPU fusion emitters are turned off (``XLA_FLAGS`` gets
  :data:`LEAN_CODEGEN_FLAG`), so each compile records ~150 instead of ~2,500
  MLIR codegen-pass events on the ``tf_xla-cpu-codegen/*`` threads
  (``--xla-default-codegen`` keeps XLA's defaults). The same kinds of lines and
  events are present either way; the compiled kernels differ slightly.

Timings differ on every run; the schedule, the shapes and hence the set of
compiled variants are deterministic.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

HERE = Path(__file__).resolve().parent
OUTPUT = HERE.parent / "sample_traces" / "jax_cpu_decode_recompile.xplane.pb.gz"

SEED = 0
BUCKETS: tuple[int, ...] = (16, 32, 64)
DECODE_STEPS = 3
LEAN_CODEGEN_FLAG = "--xla_cpu_use_fusion_emitters=false"
UNBUCKETED = "unbucketed"
BUCKETED = "bucketed"


@dataclass(frozen=True)
class Config:
    """Model hyper-parameters (hashable: passed to ``jit`` as a static argument)."""

    vocab_size: int = 512
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 2
    head_dim: int = 64  # the TPU-padding case: a minor dim of 64 under T(8,128) tiling
    d_ff: int = 384  # SwiGLU hidden size
    max_seq_len: int = 128  # KV-cache length
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6


@dataclass(frozen=True)
class Request:
    """One request of the serving schedule."""

    prompt_len: int
    mode: str  # UNBUCKETED or BUCKETED
    batch: int = 1

    @property
    def compiled_len(self) -> int:
        """Sequence length ``prefill`` is called (and compiled) with."""
        if self.mode == UNBUCKETED:
            return self.prompt_len
        return next(b for b in BUCKETS if b >= self.prompt_len)


# The default schedule (``--requests 7``). Comments: which jit variants compile.
BASE_SCHEDULE: tuple[Request, ...] = (
    Request(12, UNBUCKETED),  # prefill B=1,T=12 (new); decode_step B=1 (new)
    Request(20, UNBUCKETED),  # prefill T=20 (new)
    Request(12, UNBUCKETED),  # prefill cache hit (same length as request 0)
    Request(9, BUCKETED),  # prefill T=16 (new), 7 padded positions
    Request(14, BUCKETED),  # prefill cache hit on T=16, 2 padded
    Request(45, BUCKETED),  # prefill T=64 (new), 19 padded
    Request(21, BUCKETED, batch=2),  # prefill B=2,T=32 (new), 11 padded per row; decode_step B=2 (new)
)


def make_schedule(n_requests: int) -> list[Request]:
    """The first ``n_requests`` requests: :data:`BASE_SCHEDULE`, then seeded extras.

    Extra requests alternate unbucketed/bucketed, batch 1, with prompt lengths
    drawn from a fixed-seed generator in ``[1, max(BUCKETS)]``.
    """
    schedule = list(BASE_SCHEDULE[:n_requests])
    rng = np.random.default_rng(SEED + 1)
    i = len(schedule)
    while len(schedule) < n_requests:
        mode = UNBUCKETED if i % 2 == 0 else BUCKETED
        schedule.append(Request(int(rng.integers(1, max(BUCKETS) + 1)), mode))
        i += 1
    return schedule


Params = dict[str, jax.Array]
LAYER_PARAMS = ("attn_norm", "wqkv", "wo", "mlp_norm", "w_gate", "w_up", "w_down")  # leading dim: layer


class KVCache(NamedTuple):
    """Keys and values for every layer, ``[layers, B, heads, max_seq_len, head_dim]``."""

    k: jax.Array
    v: jax.Array


def init_params(cfg: Config, seed: int = SEED) -> Params:
    """Random (scaled normal) weights from ``jax.random.key(seed)``; norms start at one.

    One ``jax.random.normal`` draw, split up in numpy and transferred, so that
    initialisation compiles only two small modules (``jit__threefry_seed``,
    ``jit__normal``), before the capture starts: they still appear in
    ``/host:metadata`` (which lists every module of the process) but have no
    compile events in the trace window.
    """
    shapes = {
        "embed": (cfg.vocab_size, cfg.d_model),
        "wqkv": (cfg.n_layers, cfg.d_model, 3 * cfg.n_heads * cfg.head_dim),
        "wo": (cfg.n_layers, cfg.n_heads * cfg.head_dim, cfg.d_model),
        "w_gate": (cfg.n_layers, cfg.d_model, cfg.d_ff),
        "w_up": (cfg.n_layers, cfg.d_model, cfg.d_ff),
        "w_down": (cfg.n_layers, cfg.d_ff, cfg.d_model),
        "lm_head": (cfg.d_model, cfg.vocab_size),
    }
    sizes = [math.prod(shape) for shape in shapes.values()]
    flat = np.asarray(jax.random.normal(jax.random.key(seed), (sum(sizes),), jnp.float32))
    params: Params = {}
    for (name, shape), chunk in zip(shapes.items(), np.split(flat, np.cumsum(sizes)[:-1])):
        params[name] = jax.device_put(chunk.reshape(shape) / np.float32(math.sqrt(shape[-2])))
    params["attn_norm"] = jax.device_put(np.ones((cfg.n_layers, cfg.d_model), np.float32))
    params["mlp_norm"] = jax.device_put(np.ones((cfg.n_layers, cfg.d_model), np.float32))
    params["final_norm"] = jax.device_put(np.ones((cfg.d_model,), np.float32))
    return params


def empty_cache(cfg: Config, batch: int) -> KVCache:
    """A zeroed cache, transferred from numpy (``jnp.zeros`` would compile a helper per shape)."""
    shape = (cfg.n_layers, batch, cfg.n_heads, cfg.max_seq_len, cfg.head_dim)
    zeros = np.zeros(shape, np.float32)
    return KVCache(jax.device_put(zeros), jax.device_put(zeros))


def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rope(x: jax.Array, positions: jax.Array, cfg: Config) -> jax.Array:
    """Rotary embedding; x: ``[B, H, T, Dh]``, positions: ``[T]``."""
    inv_freq = 1.0 / (cfg.rope_theta ** (jnp.arange(0, cfg.head_dim, 2, dtype=jnp.float32) / cfg.head_dim))
    angles = positions.astype(jnp.float32)[:, None] * inv_freq[None, :]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate((x1 * cos - x2 * sin, x1 * sin + x2 * cos), axis=-1)


def forward(
    params: Params, cache: KVCache, tokens: jax.Array, start: jax.Array, valid_len: jax.Array, cfg: Config
) -> tuple[jax.Array, KVCache]:
    """Run ``tokens`` ``[B, T]`` at positions ``start .. start+T-1`` through the model.

    Writes their keys/values into the cache at ``start`` and lets position ``p``
    attend to cached positions ``<= p`` that are also ``< valid_len`` (the end
    of the real, unpadded tokens). The layers run under :func:`jax.lax.scan`
    over the stacked per-layer weights (one compiled layer body, as in most JAX
    LLM code). Returns the final-normed hidden states ``[B, T, d_model]``.
    """
    b, t = tokens.shape
    h, dh = cfg.n_heads, cfg.head_dim
    positions = start + jnp.arange(t)
    key_pos = jnp.arange(cfg.max_seq_len)
    mask = (key_pos[None, :] <= positions[:, None]) & (key_pos[None, :] < valid_len)  # [T, S]
    layer_params = {name: params[name] for name in LAYER_PARAMS}

    def layer(
        x: jax.Array, xs: tuple[Params, jax.Array, jax.Array]
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        p, k_cache, v_cache = xs
        y = rms_norm(x, p["attn_norm"], cfg.norm_eps)
        qkv = (y @ p["wqkv"]).reshape(b, t, 3, h, dh).transpose(2, 0, 3, 1, 4)
        q, k, v = rope(qkv[0], positions, cfg), rope(qkv[1], positions, cfg), qkv[2]
        k_all = jax.lax.dynamic_update_slice(k_cache, k, (0, 0, start, 0))
        v_all = jax.lax.dynamic_update_slice(v_cache, v, (0, 0, start, 0))
        scores = jnp.einsum("bhtd,bhsd->bhts", q, k_all) / math.sqrt(dh)
        scores = jnp.where(mask[None, None], scores, -1e30)
        attn = jnp.einsum("bhts,bhsd->bhtd", jax.nn.softmax(scores, axis=-1), v_all)
        x = x + attn.transpose(0, 2, 1, 3).reshape(b, t, h * dh) @ p["wo"]
        y = rms_norm(x, p["mlp_norm"], cfg.norm_eps)
        x = x + (jax.nn.silu(y @ p["w_gate"]) * (y @ p["w_up"])) @ p["w_down"]
        return x, (k_all, v_all)

    x, (new_k, new_v) = jax.lax.scan(layer, params["embed"][tokens], (layer_params, cache.k, cache.v))
    return rms_norm(x, params["final_norm"], cfg.norm_eps), KVCache(new_k, new_v)


@partial(jax.jit, static_argnames="cfg")
def prefill(
    params: Params, cache: KVCache, tokens: jax.Array, true_len: jax.Array, cfg: Config
) -> tuple[jax.Array, KVCache]:
    """Prompt pass; ``tokens`` ``[B, T]`` may be right-padded beyond ``true_len``.

    Compiled once per ``(B, T)``. Returns the greedy next token ``[B]`` (taken
    at position ``true_len - 1``) and the filled cache.
    """
    hidden, cache = forward(params, cache, tokens, jnp.int32(0), true_len, cfg)
    last = jax.lax.dynamic_index_in_dim(hidden, true_len - 1, axis=1, keepdims=False)
    return jnp.argmax(last @ params["lm_head"], axis=-1).astype(jnp.int32), cache


@partial(jax.jit, static_argnames="cfg")
def decode_step(
    params: Params, cache: KVCache, token: jax.Array, pos: jax.Array, cfg: Config
) -> tuple[jax.Array, KVCache]:
    """One token ``[B]`` at position ``pos`` (traced: compiled once per batch size)."""
    hidden, cache = forward(params, cache, token[:, None], pos, pos + 1, cfg)
    return jnp.argmax(hidden[:, 0] @ params["lm_head"], axis=-1).astype(jnp.int32), cache


def serve(
    params: Params, cfg: Config, schedule: list[Request], prompts: list[np.ndarray]
) -> list[np.ndarray]:
    """Run every request (prefill + :data:`DECODE_STEPS` decode steps); return the generated tokens."""
    outputs = []
    step = 0
    for i, (req, prompt) in enumerate(zip(schedule, prompts)):
        t = req.compiled_len
        padded = np.zeros((req.batch, t), np.int32)
        padded[:, : req.prompt_len] = prompt
        with jax.profiler.TraceAnnotation(f"request{i}_{req.mode}_b{req.batch}"):
            with jax.profiler.TraceAnnotation(f"prefill_len{req.prompt_len}_T{t}"):
                cache = empty_cache(cfg, req.batch)
                token, cache = prefill(params, cache, jax.device_put(padded), np.int32(req.prompt_len), cfg)
                token.block_until_ready()
            generated = [token]
            for j in range(DECODE_STEPS):
                with jax.profiler.StepTraceAnnotation("decode", step_num=step):
                    token, cache = decode_step(params, cache, token, np.int32(req.prompt_len + j), cfg)
                    token.block_until_ready()
                step += 1
                generated.append(token)
        outputs.append(np.stack([np.asarray(g) for g in generated], axis=1))
    return outputs


def capture(schedule: list[Request], python_tracer: bool, output: Path) -> list[np.ndarray]:
    """Serve ``schedule`` under :func:`jax.profiler.trace` and copy the xplane to ``output``."""
    cfg = Config()
    assert max(BUCKETS) + DECODE_STEPS <= cfg.max_seq_len
    params = init_params(cfg)
    rng = np.random.default_rng(SEED)
    prompts = [rng.integers(0, cfg.vocab_size, (r.batch, r.prompt_len), dtype=np.int32) for r in schedule]
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 1 if python_tracer else 0
    options.host_tracer_level = 2
    with tempfile.TemporaryDirectory(prefix="tracekit-jax-") as logdir:
        with jax.profiler.trace(logdir, profiler_options=options):
            outputs = serve(params, cfg, schedule, prompts)
        found = sorted(Path(logdir).glob("plugins/profile/*/*.xplane.pb"))
        if len(found) != 1:
            raise RuntimeError(f"expected one .xplane.pb under {logdir}, found {found}")
        output.parent.mkdir(parents=True, exist_ok=True)
        if output.name.endswith(".gz"):
            # filename="" and mtime=0: no temp path or time stamp in the gzip header.
            with (
                found[0].open("rb") as src,
                output.open("wb") as raw,
                gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as dst,
            ):
                shutil.copyfileobj(src, dst)
        else:
            shutil.copyfile(found[0], output)
    return outputs


COMPILE_EVENTS = ("backend_compile_and_load", "PjRtCpuClient::Compile")


def summarize(path: Path) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """Events per line (``<plane> | <line>``) and counts of the main compile/dispatch events."""
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)
    data = jax.profiler.ProfileData.from_serialized_xspace(raw)
    per_line: collections.Counter[str] = collections.Counter()
    key_events: collections.Counter[str] = collections.Counter()
    for plane in data.planes:
        for line in plane.lines:
            kind = line.name.split("/")[0]  # thread pools: "<pool>/<thread id>"
            for event in line.events:
                per_line[f"{plane.name} | {kind}"] += 1
                if event.name in COMPILE_EVENTS or event.name in (
                    "PjitFunction(prefill)",
                    "PjitFunction(decode_step)",
                ):
                    key_events[event.name] += 1
    return per_line, key_events


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Capture the bundled JAX CPU xplane sample.")
    parser.add_argument(
        "--output", type=Path, default=OUTPUT, help=f"where to write it [default: sample_traces/{OUTPUT.name}]"
    )
    parser.add_argument(
        "--python-tracer",
        action="store_true",
        help="turn the JAX Python tracer on (tens of times more events)",
    )
    parser.add_argument(
        "--requests",
        type=int,
        default=len(BASE_SCHEDULE),
        help=f"number of requests [default: {len(BASE_SCHEDULE)}]",
    )
    parser.add_argument(
        "--xla-default-codegen",
        action="store_true",
        help=f"keep XLA's default CPU fusion emitters (do not add {LEAN_CODEGEN_FLAG}; ~2.5x more events)",
    )
    args = parser.parse_args(argv)
    if args.requests < 1:
        parser.error("--requests must be >= 1")
    if not args.xla_default_codegen:
        # Read when the CPU client is created, i.e. on first use, which is below.
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {LEAN_CODEGEN_FLAG}".strip()
    output: Path = args.output.resolve()
    schedule = make_schedule(args.requests)
    outputs = capture(schedule, args.python_tracer, output)

    per_line, key_events = summarize(output)
    gz = ", gzip" if output.name.endswith(".gz") else ""
    print(f"wrote {output} ({output.stat().st_size} bytes{gz})")
    print(f"jax {jax.__version__}; XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    print(f"{len(schedule)} requests, {sum(o.shape[0] for o in outputs)} sequences generated")
    print(f"{sum(per_line.values())} events: " + ", ".join(f"{k}={v}" for k, v in sorted(per_line.items())))
    print(", ".join(f"{k}={v}" for k, v in sorted(key_events.items())))


if __name__ == "__main__":
    main()
