"""KV bytes per token against the formulas and README figures."""

from __future__ import annotations

import dataclasses

import pytest

from common.errors import TestbedError
from traffic.model.models import (
    MODELS,
    custom_model,
    dsa_bf16_pool_bytes_per_token,
    dsa_fp8_layer_bytes,
    get_model,
    kv_bytes_per_token,
    kv_bytes_per_token_per_rank,
    rank_heads,
)

# bf16 bytes per token, worked out by hand from the published model configs
# (GQA: 2 x layers x kv_heads x head_dim x 2 B; MLA: layers x (512 + 64) x 2 B)
README_BF16 = {"llama-3.1-8b": 131_072, "llama-3.1-70b": 327_680, "qwen3-32b": 262_144,
               "glm-4.5": 376_832, "deepseek-v3": 70_272, "glm-5": 89_856}
SHAPES = {"llama-3.1-8b": ("gqa", 32, 8, 128), "llama-3.1-70b": ("gqa", 80, 8, 128),
          "qwen3-32b": ("gqa", 64, 8, 128), "glm-4.5": ("gqa", 92, 8, 128),
          "deepseek-v3": ("mla", 61, 512, 64), "glm-5": ("mla", 78, 512, 64)}


# GLM-5's FP8 cache is the published DSA layout, not latent x 1 B (its own test below)
FORMULA_CASES = [(name, dtype, width) for name in sorted(README_BF16) for dtype, width in (("bf16", 2), ("fp8", 1))
                 if (name, dtype) != ("glm-5", "fp8")]


@pytest.mark.parametrize("name,dtype,width", FORMULA_CASES)
def test_kv_bytes_match_readme_and_formula(name, dtype, width):
    model = get_model(name)
    kind, layers, a, b = SHAPES[name]
    assert (model.attention, model.layers) == (kind, layers)
    formula = 2 * layers * a * b * width if kind == "gqa" else layers * (a + b) * width
    assert kv_bytes_per_token(model, dtype) == formula
    assert kv_bytes_per_token(model, dtype) == README_BF16[name] * width // 2


def test_glm5_fp8_kv_is_the_published_dsa_layout_summed_from_its_parts():
    # FlashMLA's "FP8 with scale" latent: 512 FP8 NoPE values (1 B each), one float32 scale per 128 of them,
    # 64 rope values kept BF16; SGLang's indexer key: 128 FP8 values and one float32 scale. Every layer.
    glm5 = get_model("glm-5")
    latent = 512 * 1 + (512 // 128) * 4 + 64 * 2
    indexer = 128 * 1 + (128 // 128) * 4
    assert (latent, indexer) == (656, 132)
    assert dsa_fp8_layer_bytes(glm5) == {"nope": 512, "nope_scales": 16, "rope": 128, "index_k": 128,
                                         "index_k_scales": 4}
    assert kv_bytes_per_token(glm5, "fp8") == 78 * (latent + indexer) == 61_464
    assert kv_bytes_per_token_per_rank(glm5, "fp8", 8) == 61_464  # MLA: every TP rank holds the full copy
    # bf16 keeps the latent and rope alone (what the default experiment always used); SGLang's BF16 pool adds
    # the FP8 indexer keys beside it
    assert kv_bytes_per_token(glm5, "bf16") == 78 * (512 + 64) * 2 == 89_856
    assert dsa_bf16_pool_bytes_per_token(glm5) == 78 * ((512 + 64) * 2 + indexer) == 100_152
    # models without an indexer are unchanged in either dtype
    assert kv_bytes_per_token(get_model("deepseek-v3"), "fp8") == 61 * 576
    assert kv_bytes_per_token(get_model("kimi-k2"), "fp8") == 61 * 576


def test_routed_expert_parameters_come_from_the_config_shape():
    glm5 = get_model("glm-5")
    assert glm5.expert.routed_params == 75 * 256 * 3 * 6144 * 2048 == 724_775_731_200
    assert glm5.params == 744e9 and glm5.expert.routed_params < glm5.params
    assert get_model("deepseek-v3").expert.routed_params == 58 * 256 * 3 * 7168 * 2048


@pytest.mark.parametrize("tp,heads", [(1, 8), (2, 4), (4, 2), (8, 1), (16, 1), (32, 1)])
def test_gqa_per_rank_heads_and_replication(tp, heads):
    model = get_model("llama-3.1-70b")
    assert kv_bytes_per_token_per_rank(model, "bf16", tp) == 2 * 80 * heads * 128 * 2
    held = [h for r in range(tp) for h in rank_heads(model, tp, r)]
    assert sorted(set(held)) == list(range(8))          # every head somewhere
    assert len(held) == max(8, tp)                      # replicas when tp > kv_heads
    if tp == 16:
        assert [rank_heads(model, 16, r)[0] for r in range(4)] == [0, 0, 1, 1]


@pytest.mark.parametrize("tp", [1, 2, 8, 16])
def test_mla_full_copy_per_rank(tp):
    assert kv_bytes_per_token_per_rank(get_model("deepseek-v3"), "fp8", tp) == 35_136


def test_unknown_model_lists_known_names():
    with pytest.raises(TestbedError) as info:
        get_model("gpt-5")
    text = str(info.value)
    assert "'gpt-5'" in text and all(name in text for name in MODELS) and "\n" not in text
    assert get_model("Llama-3.1-8B") is MODELS["llama-3.1-8b"]


@pytest.mark.parametrize("call,message", [
    (lambda m: kv_bytes_per_token(m, "fp32"), "KV dtype 'fp32' is not known; expected one of bf16, fp8"),
    (lambda m: kv_bytes_per_token_per_rank(m, "bf16", 3), "TP 3 does not split 8 kv heads"),
    (lambda m: kv_bytes_per_token_per_rank(m, "bf16", 0), "tensor-parallel degree 0"),
])
def test_bad_dtype_and_tp(call, message):
    with pytest.raises(TestbedError, match=message):
        call(get_model("llama-3.1-8b"))


def test_custom_model_and_validation():
    m = custom_model("tiny", "gqa", layers=2, kv_heads=4, head_dim=64, prefill_tokens_per_s_per_gpu=1e5)
    assert kv_bytes_per_token(m, "bf16") == 2 * 2 * 4 * 64 * 2
    mla = custom_model("tiny-mla", "mla", layers=3, kv_lora_rank=256, rope_dim=32)
    assert kv_bytes_per_token_per_rank(mla, "fp8", 4) == 3 * 288
    for kwargs, message in [
        (dict(attention="gqa", layers=0, kv_heads=8, head_dim=128), "layers 0"),
        (dict(attention="gqa", layers=2, kv_heads=0, head_dim=128), "kv_heads 0"),
        (dict(attention="mha", layers=2, kv_heads=8, head_dim=128), "attention 'mha'"),
        (dict(attention="mla", layers=2), "kv_lora_rank 0"),
        (dict(attention="gqa", layers=2, kv_heads=8, head_dim=8, kv_lora_rank=512), "MLA only"),
        (dict(attention="gqa", layers=2, kv_heads=8, head_dim=8, prefill_tokens_per_s_per_gpu=0),
         "prefill_tokens_per_s_per_gpu 0"),
    ]:
        with pytest.raises(TestbedError, match=message):
            custom_model("bad", **kwargs)


def test_throughput_table_is_documented_and_overridable():
    assert get_model("llama-3.1-8b").prefill_tokens_per_s_per_gpu == 40_000
    assert get_model("llama-3.1-70b").prefill_tokens_per_s_per_gpu == 5_000
    faster = dataclasses.replace(get_model("llama-3.1-70b"), prefill_tokens_per_s_per_gpu=9_000.0)
    assert faster.prefill_tokens_per_s_per_gpu == 9_000.0
