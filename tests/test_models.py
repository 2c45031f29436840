"""The model catalog (tracekit/analysis/models.toml) and Hugging Face config.json reading: counts
computed from the architecture against the numbers the model cards and released checkpoints
state (sources in docs/models-research.md), the same counts from a config.json, sources for
every entry, and docs/models.md generated from the catalog."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT
from helpers import CPU_SAMPLE, run_cli

from tracekit.analysis import models
from tracekit.errors import PathError


def test_qwen3_8b_counts_every_tensor() -> None:
    """Qwen3-8B (untied, QK-norm): 36 × 192,946,432 per layer + 2 × 151936·4096 + 4096 = the
    card's 8.2B total and 6.95B non-embedding; 16.38 GB in bf16."""
    s = models.load("qwen3-8b")
    p = s.params()
    assert p["total"] == 8_190_735_360
    assert p["total"] - p["embedding"] - p["lm_head"] - s.hidden_size == 6_946_071_552  # 36 layers
    assert s.weight_bytes()["total"] == 16_381_470_720
    assert s.kv_values_per_token() == 36 * 2 * 8 * 128


def test_gpt_oss_20b_bytes_equal_the_released_shards() -> None:
    """MXFP4 experts (4 bits + an 8-bit scale per 32 values) + bf16 attention (biases, sinks),
    router, embedding and untied unembedding = 13,761,264,768 bytes: the 4.79 + 4.8 + 4.17 GB of
    the three released safetensors shards; 20.91B parameters, 3.61B active (card: 21B / 3.6B)."""
    s = models.load("gpt-oss-20b")
    p, b = s.params(), s.weight_bytes()
    assert p["total"] == 20_914_757_184
    assert b["experts"] == 10_152_345_600 + 13_271_040  # MXFP4 weights + their bf16 biases
    assert b["total"] == 13_761_264_768
    assert abs(s.active_params_per_token() - 3.6e9) < 0.05e9


@pytest.mark.parametrize(("name", "total", "tol"), [
    ("llama-3.1-8b", 8.03e9, 0.01e9), ("llama-3.1-70b", 70.55e9, 0.01e9), ("llama-3.1-405b", 405.85e9, 0.01e9),
    ("qwen3-32b", 32.8e9, 0.05e9), ("qwen3-30b-a3b", 30.5e9, 0.05e9), ("qwen3-235b-a22b", 235e9, 0.5e9),
    ("gpt-oss-120b", 116.83e9, 0.01e9), ("mixtral-8x7b", 46.7e9, 0.05e9), ("deepseek-v3", 671e9, 0.5e9),
])
def test_totals_match_the_model_cards(name: str, total: float, tol: float) -> None:
    assert abs(models.load(name).params()["total"] - total) <= tol


def test_moe_active_parameters_and_gemma_non_embedding() -> None:
    # the cards count "active" with (Qwen, Mixtral) or without (gpt-oss) the input embedding
    q = models.load("qwen3-30b-a3b")
    assert abs(q.active_params_per_token() + q.params()["embedding"] - 3.3e9) < 0.1e9
    m = models.load("mixtral-8x7b")
    assert abs(m.active_params_per_token() + m.params()["embedding"] - 12.9e9) < 0.05e9
    assert abs(models.load("gpt-oss-120b").active_params_per_token() - 5.1e9) < 0.05e9
    g = models.load("gemma-3-27b")  # report: 25,600M non-embedding
    p = g.params()
    assert abs(p["total"] - p["embedding"] - p["lm_head"] - 25.6e9) < 0.01e9
    assert g.tie_word_embeddings is None  # not found in a source: counted untied, and said so
    # DeepSeek-V3: MLA caches the 512-value latent + 64 rope values per token per layer
    assert models.load("deepseek-r1").kv_values_per_token() == 61 * 576


def _hf_config(spec: models.ModelSpec, **extra: object) -> dict[str, object]:
    """A config.json as Hugging Face writes one for ``spec`` (its real field names)."""
    cfg: dict[str, object] = {
        "architectures": [spec.architecture], "hidden_size": spec.hidden_size,
        "num_hidden_layers": spec.num_hidden_layers, "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads, "head_dim": spec.head_dim,
        "intermediate_size": spec.intermediate_size or spec.moe.moe_intermediate_size,
        "vocab_size": spec.vocab_size, "tie_word_embeddings": bool(spec.tie_word_embeddings),
        "torch_dtype": "bfloat16", "max_position_embeddings": spec.max_position_embeddings,
    }
    cfg.update(extra)
    return cfg


def test_config_json_gives_the_catalog_numbers(tmp_path: Path) -> None:
    q = models.load("qwen3-8b")
    path = tmp_path / "Qwen3-8B" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(_hf_config(q, rope_theta=1000000, sliding_window=None, use_sliding_window=False)))
    got = models.load(str(path))
    assert got.origin == "config.json" and got.key == "Qwen3-8B"
    assert got.params() == q.params() and got.weight_bytes() == q.weight_bytes()

    g = models.load("gpt-oss-20b")
    cfg = _hf_config(g, attention_bias=True, num_local_experts=32, experts_per_token=4, num_experts_per_tok=4,
                     sliding_window=128, layer_types=["sliding_attention", "full_attention"] * 12,
                     quantization_config={"quant_method": "mxfp4",
                                          "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]})
    (tmp_path / "oss.json").write_text(json.dumps(cfg))
    got = models.load(str(tmp_path / "oss.json"))
    assert (got.expert_weights_dtype, got.window) == ("mxfp4", models.SlidingWindow(128, 2))
    assert got.weight_bytes()["total"] == g.weight_bytes()["total"] == 13_761_264_768

    d = models.load("deepseek-v3")
    cfg = _hf_config(d, intermediate_size=18432, moe_intermediate_size=2048, n_routed_experts=256,
                     num_experts_per_tok=8, n_shared_experts=1, first_k_dense_replace=3, q_lora_rank=1536,
                     kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
                     quantization_config={"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]})
    (tmp_path / "ds.json").write_text(json.dumps(cfg))
    got = models.load(str(tmp_path / "ds.json"))
    assert got.params() == d.params() and got.weights_dtype == "fp8"


def test_bad_model_arguments_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(models.ModelError, match="not a catalog model .*qwen3-8b.* and not a config.json"):
        models.load("qwen9-1t")
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(models.ModelError, match="cannot read config.json"):
        models.load(str(bad))
    bad.write_text(json.dumps({"architectures": ["X"], "hidden_size": 8}))
    with pytest.raises(models.ModelError, match="not a decoder config"):
        models.load(str(bad))
    with pytest.raises(models.ModelError, match="unknown weight format"):
        models.load("qwen3-8b", weights="fp3")
    # fp8 linear layers (6.95B values) + the bf16 embedding and LM head (2 × 1.24 GB)
    assert 9.3e9 < models.load("QWEN3-8B", weights="fp8").weight_bytes()["total"] < 9.5e9


def test_every_entry_cites_known_sources() -> None:
    raw = models._raw_catalog()
    keys = set(models.sources())
    for name, entry in raw["models"].items():
        assert entry.get("sources"), name
        for field_name, cited in entry["sources"].items():
            tags = [t.strip().split(" ")[0].rstrip(";,") for t in cited.replace(";", ",").split(",")]
            assert any(t in keys for t in tags), f"{name}.{field_name}: {cited} cites no known source"


def test_docs_models_md_is_generated_from_the_catalog() -> None:
    got = (ROOT / "docs" / "models.md").read_text(encoding="utf-8")
    assert got == models.markdown(), "docs/models.md is stale: run `python -m tracekit.analysis.models`"


def test_quantized_weights_keep_embedding_head_and_norms_in_bf16() -> None:
    """--weights fp8 quantizes the linear layers only: an fp8 Llama 3.1 8B checkpoint keeps its
    128256 × 4096 LM head and embedding in bf16 (1.05 GB each), as vLLM's fp8 checkpoints do."""
    bf, f8 = models.load("llama-3.1-8b"), models.load("llama-3.1-8b", weights="fp8")
    b, q = bf.weight_bytes(), f8.weight_bytes()
    assert q["lm_head"] == b["lm_head"] == 128256 * 4096 * 2 and q["embedding"] == b["embedding"]
    assert q["norms"] == b["norms"]
    for cls in ("attention", "dense_mlp"):
        assert q[cls] == pytest.approx(b[cls] / 2 * models.FORMAT_BYTES["fp8"], rel=1e-12)
    # the step reads the fp8 linear layers and the bf16 head: 6.98 + 1.05 GB
    assert f8.step_constants()["weight_bytes_fixed"] == pytest.approx(q["total"] - q["embedding"], rel=1e-12)


def test_model_errors_name_what_the_user_gave(tmp_path: Path) -> None:
    """Each ModelError is a PathError whose path is what the user gave (the name, the file, the
    format), so the CLI prints ``error: <that>: <reason>``."""
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"architectures": ["X"], "hidden_size": 8}))
    for arg, weights, path in [("qwen9-1t", None, "qwen9-1t"), (str(bad), None, str(bad)),
                               ("qwen3-8b", "fp3", "fp3")]:
        with pytest.raises(PathError) as info:
            models.load(arg, weights=weights)
        assert isinstance(info.value, models.ModelError)
        assert info.value.path == path
        assert str(info.value) == f"{path}: {info.value.reason}"


def test_config_json_field_of_the_wrong_type_is_a_model_error(tmp_path: Path) -> None:
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
           "num_hidden_layers": 2, "vocab_size": 100, "intermediate_size": "wide"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(models.ModelError, match=r"not a decoder config: bad value: .*'wide'") as info:
        models.load(str(path))
    assert info.value.path == str(path)


_GOOD_ENTRY = {"name": "X", "architecture": "XForCausalLM", "num_hidden_layers": 2, "hidden_size": 64,
               "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 16, "vocab_size": 100}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_hidden_layers": "36"}, r"models\.x\.num_hidden_layers: expected a int, got '36'"),
        ({"num_hidden_layer": 36}, r"models\.x: unknown key\(s\) num_hidden_layer \(known: "),
        ({"qk_norm": 1}, r"models\.x\.qk_norm: expected a bool, got 1"),
        ({"vocab_size": None}, r"models\.x: missing field\(s\) vocab_size$"),
    ],
)
def test_catalog_entry_of_the_wrong_shape_is_a_path_error(
    monkeypatch: pytest.MonkeyPatch, change: dict[str, object], message: str
) -> None:
    """The catalog TOML is read into the typed ModelSpec: a wrong type, an unknown key or a
    missing field is one ModelError naming the catalog file and the entry's key."""
    entry = {k: v for k, v in {**_GOOD_ENTRY, **change}.items() if v is not None}
    monkeypatch.setattr(models, "_raw_catalog", lambda: {"models": {"x": entry}})
    with pytest.raises(models.ModelError, match=message) as info:
        models.catalog.__wrapped__()
    assert info.value.path == "tracekit/analysis/models.toml"
    monkeypatch.setattr(models, "_raw_catalog", lambda: {"models": {"x": _GOOD_ENTRY}})
    assert models.catalog.__wrapped__()["x"].num_hidden_layers == 2  # the good entry loads


def test_bad_config_json_through_the_cli_is_one_line(tmp_path: Path) -> None:
    """``tracekit ingest --model`` with a config.json whose field has the wrong type: one line
    ``error: <file>: <reason>``, exit 2, no store written."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
                               "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
                               "num_experts": "many"}))
    store = tmp_path / "s.duckdb"
    res = run_cli("ingest", str(CPU_SAMPLE), "--store", str(store), "--model", str(cfg))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {cfg}: not a decoder config: bad value:"), lines
    assert not store.exists()


def test_stored_json_is_flat_and_round_trips_through_the_groups() -> None:
    """The JSON stored with a run names every field flat, as the catalog does (the MoE, window
    and MLA groups are an in-memory shape only), and reads back to the same spec."""
    toml_fields = {k for entry in models._raw_catalog()["models"].values() for k in entry} - {
        "aliases", "not_found", "quantization"}
    for spec in {s.key: s for s in models.catalog().values()}.values():
        stored = json.loads(models.to_json(spec))
        assert toml_fields <= set(stored) and not {"moe", "window", "mla"} & set(stored)
        assert models.from_json(models.to_json(spec)) == spec
    ds = models.load("deepseek-v3")
    stored = json.loads(models.to_json(ds))
    assert (stored["kv_lora_rank"], stored["num_experts"]) == (ds.mla.kv_lora_rank, ds.moe.num_experts) == (512, 256)
