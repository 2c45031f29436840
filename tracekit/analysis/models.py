"""The model catalog: architecture facts of open LLMs, and the parameter counts and weight bytes
they imply, for costing a decode or prefill step by what it must move (issue 15).

Entries live in ``tracekit/analysis/models.toml`` (each value with its source; research notes in
``docs/models-research.md``); a user's Hugging Face ``config.json`` is read by
:func:`from_hf_config` into the same :class:`ModelSpec`. :func:`load` takes either.

Counts are exact from the architecture (every weight matrix, bias, norm scale and attention sink
of the decoder, embedding and LM head); tests check them against the model cards (Qwen3-8B:
8,190,735,360 parameters; gpt-oss-20b: 20,914,757,184 parameters, 13,761,264,768 bytes, which is
the size of its three released shards). Bytes use each tensor class's storage format: ``bf16``
2 bytes per value, ``fp8`` 1 byte plus one float32 scale per 128×128 block, ``mxfp4`` half a byte
plus one 8-bit scale per 32 values (4.25 bits).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from tracekit.config_toml import typed_table, unknown_keys
from tracekit.errors import PathError

#: bytes per stored value of each weight format (scales included)
FORMAT_BYTES = {
    "bf16": 2.0, "fp16": 2.0, "fp32": 4.0,
    "fp8": 1.0 + 4.0 / (128 * 128),  # e4m3 + a float32 scale per 128x128 block (DeepSeek-V3)
    "mxfp4": 0.5 + 1.0 / 32,  # 4-bit values + one E8M0 scale per 32 values (OCP MX)
    "int8": 1.0, "int4": 0.5,
}
#: storage formats that quantize (scales included in FORMAT_BYTES)
QUANTIZED = frozenset({"fp8", "mxfp4", "int8", "int4"})
#: tensor classes a quantized checkpoint stores in its quantized format
LINEAR_CLASSES = frozenset({"attention", "dense_mlp", "experts", "shared_experts"})
_DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float8_e4m3fn": "fp8",
                  "e4m3": "fp8", "fp8_e4m3": "fp8"}


class ModelError(PathError, ValueError):
    """A model name that is not in the catalog, a config.json tracekit cannot read, an unknown
    storage format, or a catalog entry of the wrong shape: ``path`` is the name, file or format
    concerned."""


@dataclass(frozen=True)
class MoE:
    """A model's mixture-of-experts layers (all 0: a dense model): ``num_experts`` routed experts
    of ``moe_intermediate_size`` per MoE layer, ``num_experts_per_tok`` of them picked per token,
    ``n_shared_experts`` every token uses; the first ``first_k_dense_replace`` layers are dense;
    ``expert_bias`` / ``router_bias``: the experts' and the router's projections have biases
    (gpt-oss)."""

    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    n_shared_experts: int = 0
    first_k_dense_replace: int = 0
    expert_bias: bool = False
    router_bias: bool = False

    def layers(self, num_hidden_layers: int) -> int:
        """The MoE layers among ``num_hidden_layers`` (0 for a dense model)."""
        return num_hidden_layers - self.first_k_dense_replace if self.num_experts else 0


@dataclass(frozen=True)
class SlidingWindow:
    """Sliding-window attention: ``sliding_window`` tokens (0: none); ``sliding_window_pattern``
    n: every n-th layer is global, the others attend over the window (2: gpt-oss's alternation,
    6: Gemma 3's 5:1; 0: every layer windowed)."""

    sliding_window: int = 0
    sliding_window_pattern: int = 0

    def layers(self, num_hidden_layers: int) -> int:
        """The layers among ``num_hidden_layers`` that attend over the window only."""
        if not self.sliding_window:
            return 0
        if not self.sliding_window_pattern:
            return num_hidden_layers
        return num_hidden_layers - num_hidden_layers // self.sliding_window_pattern


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V3; ``kv_lora_rank`` 0: none): low-rank Q
    (``q_lora_rank``, 0: a full Q projection) and a joint K/V latent of ``kv_lora_rank`` plus a
    shared RoPE key of ``qk_rope_head_dim``; per head ``qk_nope_head_dim`` + ``qk_rope_head_dim``
    query/key and ``v_head_dim`` value dimensions."""

    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0

    def attention_params(self, hidden: int, heads: int) -> int:
        """Parameters of one layer's attention projections (Q, the K/V compression, O)."""
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        q = (hidden * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * heads * qk
             if self.q_lora_rank else hidden * heads * qk)
        kv = (hidden * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
              + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim))
        return q + kv + heads * self.v_head_dim * hidden


@dataclass(frozen=True)
class ModelSpec:
    """One decoder-only LLM. Field names follow Hugging Face ``config.json``; the MoE, sliding
    window and MLA fields are grouped in :class:`MoE`, :class:`SlidingWindow` and :class:`MLA`
    (their fields keep the ``config.json`` names; :func:`flat_values` and :func:`from_flat` map
    between the flat form the catalog, config.json and the stored JSON use and this one)."""

    key: str
    name: str
    architecture: str
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int = 0
    tie_word_embeddings: bool | None = False
    qk_norm: bool = False
    attention_bias: bool = False
    attention_sinks: bool = False
    moe: MoE = MoE()
    window: SlidingWindow = SlidingWindow()
    mla: MLA = MLA()
    max_position_embeddings: int = 0
    weights_dtype: str = "bf16"
    expert_weights_dtype: str = ""
    kv_cache_dtype: str = "bf16"
    card_params: str = ""
    notes: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)
    origin: str = "catalog"

    # -- structure ---------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.moe.num_experts > 0

    @property
    def moe_layers(self) -> int:
        return self.moe.layers(self.num_hidden_layers)

    @property
    def dense_layers(self) -> int:
        return self.num_hidden_layers - self.moe_layers

    def params(self) -> dict[str, int]:
        """Parameter counts by tensor class (every decoder layer summed): ``attention``,
        ``dense_mlp``, ``experts`` (routed), ``shared_experts``, ``router``, ``norms``,
        ``embedding``, ``lm_head`` (0 when tied) and ``total``."""
        h, heads, kv, d = self.hidden_size, self.num_attention_heads, self.num_key_value_heads, self.head_dim
        if self.mla.kv_lora_rank:
            attn = self.mla.attention_params(h, heads)
        else:
            attn = h * heads * d + 2 * h * kv * d + heads * d * h
            if self.attention_bias:
                attn += heads * d + 2 * kv * d + h
            if self.qk_norm:
                attn += 2 * d
        if self.attention_sinks:
            attn += heads
        moe = self.moe
        moe_i = moe.moe_intermediate_size
        expert = 3 * h * moe_i + ((2 * moe_i + h) if moe.expert_bias else 0)
        router = h * moe.num_experts + (moe.num_experts if moe.router_bias else 0)
        out = {
            "attention": attn * self.num_hidden_layers,
            "dense_mlp": 3 * h * self.intermediate_size * self.dense_layers,
            "experts": expert * moe.num_experts * self.moe_layers,
            "shared_experts": 3 * h * moe_i * moe.n_shared_experts * self.moe_layers,
            "router": router * self.moe_layers,
            "norms": 2 * h * self.num_hidden_layers + h,
            "embedding": self.vocab_size * h,
            "lm_head": 0 if self.tie_word_embeddings else self.vocab_size * h,
        }
        out["total"] = sum(out.values())
        return out

    def weight_bytes(self) -> dict[str, float]:
        """Bytes of the stored weights by class and ``total``: ``experts`` in ``expert_weights_dtype``
        when set, the other linear layers (attention, dense MLP, shared experts) in ``weights_dtype``;
        the embedding, LM head, norms, router and biases in ``weights_dtype`` too unless it is a
        quantized format, then in bf16."""
        p = self.params()
        base = FORMAT_BYTES[self.weights_dtype]
        exp = FORMAT_BYTES[self.expert_weights_dtype or self.weights_dtype]
        # quantized checkpoints (fp8, int8, int4, mxfp4) quantize the linear layers; the embedding,
        # LM head, norms and router stay in bf16 (DeepSeek-V3's FP8 release, vLLM's fp8 checkpoints)
        high = FORMAT_BYTES["bf16"] if self.weights_dtype in QUANTIZED else base
        h, moe = self.hidden_size, self.moe
        # expert biases are not quantized (gpt-oss keeps *_bias tensors beside *_blocks/*_scales)
        bias = ((2 * moe.moe_intermediate_size + h) * moe.num_experts * self.moe_layers
                if moe.expert_bias else 0)
        out = {k: v * (base if k in LINEAR_CLASSES else high) for k, v in p.items() if k != "total"}
        out["experts"] = (p["experts"] - bias) * exp + bias * high
        out["total"] = sum(out.values())
        return out

    def active_params_per_token(self) -> int:
        """Parameters one token touches in a forward: everything but the routed experts it does
        not pick and the embedding table (one row is read): the model cards' "active" count."""
        p = self.params()
        routed = (p["experts"] * self.moe.num_experts_per_tok // self.moe.num_experts) if self.is_moe else 0
        return p["total"] - p["experts"] + routed - p["embedding"]

    def kv_values_per_token(self) -> int:
        """KV-cache values one token adds over all layers (MLA: the compressed latent)."""
        return self._kv_values_per_layer() * self.num_hidden_layers

    def _kv_values_per_layer(self) -> int:
        return (self.mla.kv_lora_rank + self.mla.qk_rope_head_dim if self.mla.kv_lora_rank
                else 2 * self.num_key_value_heads * self.head_dim)

    @property
    def window_layers(self) -> int:
        """Layers that attend over the sliding window only (every ``sliding_window_pattern``-th
        layer is global)."""
        return self.window.layers(self.num_hidden_layers)

    def step_constants(self, tp: int = 1) -> dict[str, float]:
        """Per-rank constants of the step cost model (``step_costs`` view, docs/findings.md), under
        tensor parallelism ``tp`` (weights, heads and FLOPs split ``tp`` ways; KV heads too, at
        least one per rank). Bytes, FLOPs, tokens:

        - ``weight_bytes_fixed``: weights every step reads whatever its tokens: attention, dense
          MLP, shared experts, router, norms and the LM head (the input embedding is a lookup of
          one row per token and is left out); B.
        - ``expert_bytes``: one routed expert in every MoE layer; a step reads it once for each
          expert its tokens touch (``num_experts``, ``experts_per_token``); B.
        - ``kv_bytes_per_token_global`` / ``kv_bytes_per_token_window``: KV cache of one token
          over the global-attention / sliding-window layers (``kv_cache_dtype``); B.
        - ``sliding_window``: tokens (0 = none).
        - ``flops_per_token``: 2 × active parameters less the LM head (embedding excluded); FLOP.
        - ``lm_head_flops_per_seq``: 2 × vocab × hidden, paid once per sequence that samples; FLOP.
        - ``attn_flops_per_pair_global`` / ``_window``: QKᵀ and PV FLOPs of one query-key pair
          summed over the global / window layers (MLA: the absorbed form over the latent); FLOP.
        - ``embedding_bytes``: the input embedding table (resident, not read whole by a step; 0 when
          tied to the LM head, which ``weight_bytes_fixed`` counts); B.
        - ``activation_bytes_per_token``: hidden-state traffic between the kernels of one token
          (an estimate: residual read+write around attention and MLP, Q/K/V/O and the MLP's
          gate/up/down activations, once each, in the weights' bf16); B.
        """
        tp = max(1, int(tp))
        p = self.params()
        b = self.weight_bytes()
        h = self.hidden_size
        kv_width = FORMAT_BYTES[self.kv_cache_dtype]
        kv_heads_share = max(1.0, self.num_key_value_heads / tp) / max(1, self.num_key_value_heads)
        kv_layer = self._kv_values_per_layer() * kv_width * (1.0 if self.mla.kv_lora_rank else kv_heads_share)
        lm_head_params = self.vocab_size * h  # tied: the embedding matrix is the head
        lm_head_bytes = b["embedding"] if self.tie_word_embeddings else b["lm_head"]
        fixed = b["total"] - b["experts"] - b["embedding"] - b["lm_head"] + lm_head_bytes
        moe, mla = self.moe, self.mla
        per_expert = (b["experts"] / moe.num_experts) if self.is_moe else 0.0
        active = self.active_params_per_token() - p["lm_head"]
        if mla.kv_lora_rank:  # absorbed MLA: scores over latent+rope, values over the latent
            pair = 2 * self.num_attention_heads * (2 * mla.kv_lora_rank + mla.qk_rope_head_dim)
        else:
            pair = 4 * self.num_attention_heads * self.head_dim
        glob = self.num_hidden_layers - self.window_layers
        heads_w = self.num_attention_heads * self.head_dim
        kv_w = 2 * self.num_key_value_heads * self.head_dim
        mlp_w = 3 * (moe.moe_intermediate_size * (moe.num_experts_per_tok + moe.n_shared_experts)
                     if self.is_moe else self.intermediate_size)
        act = (4 * h + 2 * heads_w + kv_w + mlp_w) * 2.0 * self.num_hidden_layers
        return {
            "weight_bytes_fixed": fixed / tp,
            "expert_bytes": per_expert / tp,
            "num_experts": float(moe.num_experts),
            "experts_per_token": float(moe.num_experts_per_tok),
            "kv_bytes_per_token_global": kv_layer * glob,
            "kv_bytes_per_token_window": kv_layer * self.window_layers,
            "sliding_window": float(self.window.sliding_window),
            "flops_per_token": 2.0 * active / tp,
            "lm_head_flops_per_seq": 2.0 * lm_head_params / tp,
            "attn_flops_per_pair_global": float(pair * glob) / tp,
            "attn_flops_per_pair_window": float(pair * self.window_layers) / tp,
            "activation_bytes_per_token": act / tp,
            "embedding_bytes": b["embedding"] / tp if not self.tie_word_embeddings else 0.0,
            "tp": float(tp),
        }


# -- loading -------------------------------------------------------------------------------------

#: ModelSpec's groups of fields, by attribute
_GROUPS: dict[str, type[MoE | SlidingWindow | MLA]] = {"moe": MoE, "window": SlidingWindow, "mla": MLA}
#: the grouped fields' flat names, by group attribute
_GROUP_FIELDS = {attr: frozenset(f.name for f in fields(cls)) for attr, cls in _GROUPS.items()}
#: every grouped field's flat name
_GROUPED = frozenset[str]().union(*_GROUP_FIELDS.values())
#: every flat name (the catalog's, config.json's and the stored JSON's keys)
_FLAT_FIELDS = frozenset(f.name for f in fields(ModelSpec) if f.name not in _GROUPS) | _GROUPED


def from_flat(values: Mapping[str, Any]) -> ModelSpec:
    """The spec of flat ``values`` (every field by its ``config.json`` name, as the catalog and the
    stored JSON hold them); the grouped ones go to their group."""
    top = {k: v for k, v in values.items() if k not in _GROUPED}
    groups: dict[str, Any] = {attr: cls(**{k: v for k, v in values.items() if k in _GROUP_FIELDS[attr]})
                              for attr, cls in _GROUPS.items()}
    return ModelSpec(**top, **groups)


def flat_values(spec: ModelSpec) -> dict[str, Any]:
    """Every field of ``spec`` by its flat name (the inverse of :func:`from_flat`)."""
    out = {f.name: getattr(spec, f.name) for f in fields(ModelSpec) if f.name not in _GROUPS}
    for attr in _GROUPS:
        group = getattr(spec, attr)
        out |= {f.name: getattr(group, f.name) for f in fields(group)}
    return out


#: the packaged catalog, as its errors name it
_CATALOG_FILE = "tracekit/analysis/models.toml"


@cache
def _raw_catalog() -> dict[str, Any]:
    text = resources.files("tracekit.analysis").joinpath("models.toml").read_text(encoding="utf-8")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ModelError(_CATALOG_FILE, f"not valid TOML: {exc}") from None


#: keys of a catalog entry that are not fields of its spec
_ENTRY_EXTRAS = frozenset({"aliases", "not_found", "quantization"})


def _entry_values(where: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """A catalog entry's flat field values, each checked against its field's type: ValueError for
    an unknown key or a missing field, TypeError for a wrong type, the message starting ``where``."""
    known = _FLAT_FIELDS - {"key", "origin"}
    bad = unknown_keys(entry, set(known | _ENTRY_EXTRAS))
    if bad:
        raise ValueError(f"{where}: unknown key(s) {', '.join(bad)} (known: {', '.join(sorted(known))})")
    values = typed_table(ModelSpec, entry, where, given=frozenset({"key", "origin", *_GROUPS}),
                         ignored=_ENTRY_EXTRAS | _GROUPED)
    for attr, cls in _GROUPS.items():
        values |= typed_table(cls, {k: v for k, v in entry.items() if k in _GROUP_FIELDS[attr]}, where)
    return values


@cache
def catalog() -> dict[str, ModelSpec]:
    """Every catalog entry by its lower-case name, aliases included."""
    out: dict[str, ModelSpec] = {}
    for key, entry in _raw_catalog()["models"].items():
        try:
            values = _entry_values(f"models.{key}", entry)
        except (TypeError, ValueError) as exc:
            raise ModelError(_CATALOG_FILE, str(exc)) from None
        if "tie_word_embeddings" in entry.get("not_found", []):
            values["tie_word_embeddings"] = None
        spec = from_flat({"key": key, **values})
        for name in [key, *entry.get("aliases", [])]:
            out[name] = spec
    return out


def _first(cfg: Mapping[str, Any], *names: str, default: Any = 0) -> Any:
    for n in names:
        if cfg.get(n) is not None:
            return cfg[n]
    return default


def from_hf_config(cfg: Mapping[str, Any], key: str = "config.json") -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face ``config.json`` (Llama, Qwen3, Qwen3-MoE,
    gpt-oss, Mixtral, DeepSeek-V3, Gemma 3 (its ``text_config``) and the like). Fields the file
    does not have keep the dense, untied, bf16 defaults; an MXFP4 or FP8 ``quantization_config``
    sets the storage of the experts (MXFP4) or of all weights (FP8)."""
    arch = (_first(cfg, "architectures", default=[""]) or [""])[0]
    if isinstance(cfg.get("text_config"), Mapping):  # multimodal wrappers (Gemma 3): the decoder
        cfg = {**cfg["text_config"], "architectures": [arch]}
    try:
        h = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
        layers = int(cfg["num_hidden_layers"])
        vocab = int(cfg["vocab_size"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelError(key, f"not a decoder config: missing or bad {exc}") from None
    experts = int(_first(cfg, "num_local_experts", "num_experts", "n_routed_experts"))
    quant = cfg.get("quantization_config") or {}
    method = str(quant.get("quant_method", "")).lower()
    dtype = _DTYPE_ALIASES.get(str(cfg.get("torch_dtype", "bfloat16")), "bf16")
    layer_types = cfg.get("layer_types") or []
    pattern = int(_first(cfg, "sliding_window_pattern"))
    if not pattern and layer_types and "sliding_attention" in layer_types and "full_attention" in layer_types:
        pattern = layer_types.index("full_attention") + 1  # gpt-oss: [sliding, full, ...] → 2
    window = int(_first(cfg, "sliding_window")) if (cfg.get("use_sliding_window", True) or pattern) else 0
    values: dict[str, Any] = {
        "key": key, "name": str(cfg.get("_name_or_path") or key), "architecture": str(arch),
        "num_hidden_layers": layers, "hidden_size": h, "num_attention_heads": heads,
        "num_key_value_heads": int(_first(cfg, "num_key_value_heads", default=heads)),
        "head_dim": int(_first(cfg, "head_dim", default=h // heads)), "vocab_size": vocab,
        "intermediate_size": int(_first(cfg, "intermediate_size")) if not experts or cfg.get("first_k_dense_replace")
        else 0,
        "tie_word_embeddings": bool(cfg.get("tie_word_embeddings", False)),
        "qk_norm": "Qwen3" in str(arch) or "Gemma3" in str(arch) or bool(cfg.get("use_qk_norm")),
        "attention_bias": bool(cfg.get("attention_bias", False)),
        "attention_sinks": "GptOss" in str(arch),
        "num_experts": experts,
        "num_experts_per_tok": int(_first(cfg, "num_experts_per_tok", "experts_per_token")) if experts else 0,
        "moe_intermediate_size": int(_first(cfg, "moe_intermediate_size", "intermediate_size")) if experts else 0,
        "n_shared_experts": int(_first(cfg, "n_shared_experts")),
        "first_k_dense_replace": int(_first(cfg, "first_k_dense_replace")),
        "expert_bias": "GptOss" in str(arch), "router_bias": "GptOss" in str(arch),
        "sliding_window": window, "sliding_window_pattern": pattern if window else 0,
        "q_lora_rank": int(_first(cfg, "q_lora_rank")), "kv_lora_rank": int(_first(cfg, "kv_lora_rank")),
        "qk_rope_head_dim": int(_first(cfg, "qk_rope_head_dim")),
        "qk_nope_head_dim": int(_first(cfg, "qk_nope_head_dim")), "v_head_dim": int(_first(cfg, "v_head_dim")),
        "max_position_embeddings": int(_first(cfg, "max_position_embeddings")),
        "weights_dtype": "fp8" if method == "fp8" else dtype,
        "expert_weights_dtype": "mxfp4" if method == "mxfp4" else "",
        "origin": "config.json",
    }
    return from_flat(values)


def load(arg: str, *, weights: str | None = None, expert_weights: str | None = None,
         kv_cache: str | None = None) -> ModelSpec:
    """The model ``arg`` names: a catalog name (any case) or the path of a ``config.json``.
    ``weights`` / ``expert_weights`` override the storage formats (bf16, fp8, mxfp4, int8, int4);
    ``kv_cache`` the KV-cache dtype (bf16, fp8, ...)."""
    spec = catalog().get(arg.strip().lower())
    if spec is None:
        path = Path(arg)
        if not path.is_file():
            names = ", ".join(sorted({s.key for s in catalog().values()}))
            raise ModelError(arg, f"not a catalog model ({names}) and not a config.json file")
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelError(arg, f"cannot read config.json: {exc}") from None
        if not isinstance(cfg, dict):
            raise ModelError(arg, "cannot read config.json: not a JSON object")
        try:
            spec = from_hf_config(cfg, key=path.parent.name or path.name)
        except ModelError as exc:
            raise ModelError(arg, exc.reason) from None
        except (TypeError, ValueError, AttributeError) as exc:  # a field of the wrong type
            raise ModelError(arg, f"not a decoder config: bad value: {exc}") from None
    for fmt in (weights, expert_weights, kv_cache):
        if fmt is not None and _DTYPE_ALIASES.get(fmt, fmt) not in FORMAT_BYTES:
            raise ModelError(fmt, f"unknown weight format (one of {', '.join(FORMAT_BYTES)})")
    weights, expert_weights, kv_cache = (None if f is None else _DTYPE_ALIASES.get(f, f)
                                         for f in (weights, expert_weights, kv_cache))
    if kv_cache:
        spec = replace(spec, kv_cache_dtype=kv_cache)
    if weights:
        spec = replace(spec, weights_dtype=weights)
    if expert_weights:
        spec = replace(spec, expert_weights_dtype=expert_weights)
    return spec


def to_json(spec: ModelSpec) -> str:
    """The spec as a JSON object (every field; stored with the run, read back by :func:`from_json`)."""
    values = flat_values(spec)
    return json.dumps({**values, "sources": dict(values["sources"])}, sort_keys=True)


def from_json(text: str) -> ModelSpec:
    """The spec :func:`to_json` wrote (unknown keys from a newer tracekit are ignored)."""
    raw = json.loads(text)
    return from_flat({k: v for k, v in raw.items() if k in _FLAT_FIELDS})


def sources() -> dict[str, str]:
    """The catalog's source keys and what they point at."""
    return dict(_raw_catalog()["catalog"]["sources"])


def markdown() -> str:
    """``docs/models.md``: every entry, its derived counts and its sources (checked by a test)."""
    raw = _raw_catalog()["models"]
    lines = [
        "# Model catalog",
        "",
        ("<!-- generated from tracekit/analysis/models.toml by `python -m tracekit.analysis.models`; "
         "do not edit by hand -->"),
        "",
        "Architecture facts of the open LLMs the step costing needs (issue 15), each with its source;",
        "the research notes with the quotes are [models-research.md](models-research.md). A user's",
        "Hugging Face `config.json` is read into the same fields (`tracekit.analysis.models.load`).",
        "Parameter counts are computed from the architecture (every matrix, bias, norm and sink);",
        "bytes use each tensor class's storage format (bf16 2 B, fp8 1 B + a float32 scale per",
        "128×128 block, mxfp4 4.25 bits). *Active* = parameters one token touches, less the",
        "embedding table (one row is read): gpt-oss's card convention; the Qwen3 and Mixtral cards",
        "count the embedding in (add it to compare). Attach one to a run with `--model NAME` (or a",
        "config.json) on `tracekit ingest`, `analyze` or `capture`: the step costing (decode MBU,",
        "prefill MFU, batching projection) is in [findings.md](findings.md#model-aware-step-costing).",
        "",
        "| model | layers | hidden | heads / KV × dim | FFN | experts (top-k, size) | params | active | weight GB | KV values / token | card |",
        "|---|---:|---:|---|---|---|---:|---:|---:|---:|---|",
    ]
    for key in raw:
        s = catalog()[key]
        p = s.params()
        moe = (f"{s.moe.num_experts} ({s.moe.num_experts_per_tok}, {s.moe.moe_intermediate_size})"
               + (f" + {s.moe.n_shared_experts} shared" if s.moe.n_shared_experts else "") if s.is_moe else "—")
        ffn = (f"{s.intermediate_size} × {s.dense_layers} layers" if s.intermediate_size and s.dense_layers
               else "—")
        attn = f"{s.num_attention_heads} / {s.num_key_value_heads} × {s.head_dim}"
        if s.mla.kv_lora_rank:
            attn = f"{s.num_attention_heads}, MLA (kv rank {s.mla.kv_lora_rank} + rope {s.mla.qk_rope_head_dim})"
        if s.window.sliding_window:
            attn += f"; window {s.window.sliding_window} (1 global in {s.window.sliding_window_pattern})"
        tied = "" if s.tie_word_embeddings is not None else " (LM head: tie not found, counted untied)"
        lines.append(
            f"| `{key}` | {s.num_hidden_layers} | {s.hidden_size} | {attn} | {ffn} | {moe} | "
            f"{p['total'] / 1e9:.2f} B{tied} | {s.active_params_per_token() / 1e9:.2f} B | "
            f"{s.weight_bytes()['total'] / 1e9:.2f} ({s.weights_dtype}"
            f"{', experts ' + s.expert_weights_dtype if s.expert_weights_dtype else ''}) | "
            f"{s.kv_values_per_token():,} | {s.card_params} |")
    lines += ["", "## Sources per entry", ""]
    for key, entry in raw.items():
        alias = f" (also {', '.join(entry['aliases'])})" if entry.get("aliases") else ""
        lines.append(f"- **`{key}`**{alias}: " + "; ".join(f"{k}: {v}" for k, v in entry.get("sources", {}).items())
                     + (f". Not found: {', '.join(entry['not_found'])}" if entry.get("not_found") else "")
                     + (f". {entry['notes']}" if entry.get("notes") else ""))
    lines += ["", "## Source keys", "", "| key | source |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sources().items()]
    lines += ["", "Not in the catalog yet: GLM-4.5 / 4.5-Air (only secondary sources for the 4.5 files were",
              "found; see models-research.md). Pass their `config.json` instead.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    out = Path(__file__).resolve().parents[2] / "docs" / "models.md"
    out.write_text(markdown(), encoding="utf-8")
    print(f"wrote {out}")
