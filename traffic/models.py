"""Model shapes that decide how many KV-cache bytes a token makes.

No trace records KV bytes (data/traces/README.md), so they come from the
model shape:

* GQA: 2 (K and V) x layers x kv_heads x head_dim x bytes per value; a
  tensor-parallel rank holds max(1, kv_heads // tp) heads (when tp > kv_heads
  each head is replicated on tp // kv_heads ranks, as vLLM and SGLang do).
* MLA: layers x (kv_lora_rank + rope_dim) x bytes per value, and every TP rank
  holds the full copy. ``kv_heads``/``head_dim`` are unused (0 in the table).

``prefill_tokens_per_s_per_gpu`` figures are ROUGH ASSUMPTIONS for H100-class
GPUs, not measurements of ours: a TP-t instance is assumed to prefill
t x this many tokens/s (linear scaling, no queueing inside the batch). Sources
are orders of magnitude from public serving reports (dense 8B ~40k tokens/s
per GPU, dense 70B ~5k; SGLang's 96-H100 DeepSeek-V3 deployment reported
~52k prefill tokens/s per 8-GPU node, i.e. ~6.5k per GPU); the others are
scaled by active parameters. Override with ``dataclasses.replace(model,
prefill_tokens_per_s_per_gpu=...)`` or ``custom_model``.
"""

from __future__ import annotations

from dataclasses import dataclass

from traffic._check import int_at_least, one_of, real_positive
from traffic.errors import TrafficError

DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp8": 1}
ATTENTION_KINDS = ("gqa", "mla")


@dataclass(frozen=True)
class ModelSpec:
    """The shape numbers of one model that the KV size depends on."""

    name: str
    attention: str
    layers: int
    kv_heads: int
    head_dim: int
    kv_lora_rank: int = 0
    rope_dim: int = 0
    prefill_tokens_per_s_per_gpu: float = 10_000.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise TrafficError(f"model name {self.name!r} is not allowed; expected a non-empty string")
        one_of(f"model {self.name} attention", self.attention, ATTENTION_KINDS)
        int_at_least(f"model {self.name} layers", self.layers, 1)
        real_positive(f"model {self.name} prefill_tokens_per_s_per_gpu",
                      self.prefill_tokens_per_s_per_gpu)
        if self.attention == "gqa":
            int_at_least(f"model {self.name} kv_heads", self.kv_heads, 1)
            int_at_least(f"model {self.name} head_dim", self.head_dim, 1)
            if self.kv_lora_rank or self.rope_dim:
                raise TrafficError(f"model {self.name}: kv_lora_rank {self.kv_lora_rank!r} / rope_dim "
                                   f"{self.rope_dim!r} given for a GQA model; expected 0 (MLA only)")
        else:
            int_at_least(f"model {self.name} kv_lora_rank", self.kv_lora_rank, 1)
            int_at_least(f"model {self.name} rope_dim", self.rope_dim, 0)
            int_at_least(f"model {self.name} kv_heads", self.kv_heads, 0)
            int_at_least(f"model {self.name} head_dim", self.head_dim, 0)


MODELS: dict[str, ModelSpec] = {m.name: m for m in (
    ModelSpec("llama-3.1-8b", "gqa", 32, 8, 128, prefill_tokens_per_s_per_gpu=40_000.0),
    ModelSpec("llama-3.1-70b", "gqa", 80, 8, 128, prefill_tokens_per_s_per_gpu=5_000.0),
    ModelSpec("qwen3-32b", "gqa", 64, 8, 128, prefill_tokens_per_s_per_gpu=10_000.0),
    # GLM-4.5: 355B MoE with 32B active parameters.
    ModelSpec("glm-4.5", "gqa", 92, 8, 128, prefill_tokens_per_s_per_gpu=8_000.0),
    # DeepSeek-V3: 671B MoE, 37B active.
    ModelSpec("deepseek-v3", "mla", 61, 0, 0, kv_lora_rank=512, rope_dim=64,
              prefill_tokens_per_s_per_gpu=6_500.0),
    # GLM-5: MLA, 78 layers; sparse-attention indexer keys not counted.
    ModelSpec("glm-5", "mla", 78, 0, 0, kv_lora_rank=512, rope_dim=64,
              prefill_tokens_per_s_per_gpu=5_000.0),
)}


def get_model(name: str) -> ModelSpec:
    """Look a model up by name (case-insensitive)."""
    key = name.lower() if isinstance(name, str) else name
    if key not in MODELS:
        raise TrafficError(f"model {name!r} is not known; expected one of {', '.join(MODELS)}")
    return MODELS[key]


def custom_model(name: str, attention: str, layers: int, kv_heads: int = 0, head_dim: int = 0,
                 kv_lora_rank: int = 0, rope_dim: int = 0,
                 prefill_tokens_per_s_per_gpu: float = 10_000.0) -> ModelSpec:
    """Build a validated model not in the table (GQA: kv_heads, head_dim; MLA: lora, rope)."""
    return ModelSpec(name, attention, layers, kv_heads, head_dim, kv_lora_rank, rope_dim,
                     prefill_tokens_per_s_per_gpu)


def dtype_bytes(dtype: str) -> int:
    """Bytes per KV value for a dtype name."""
    return DTYPE_BYTES[one_of("KV dtype", dtype, DTYPE_BYTES)]


def bytes_per_head_per_token(model: ModelSpec, dtype: str) -> int:
    """GQA: K and V of one kv head over all layers, for one token."""
    if model.attention != "gqa":
        raise TrafficError(f"model {model.name} is {model.attention}; expected a GQA model for per-head bytes")
    return 2 * model.layers * model.head_dim * dtype_bytes(dtype)


def kv_bytes_per_token(model: ModelSpec, dtype: str) -> int:
    """KV bytes one token adds to the whole model (one copy, no replication)."""
    if model.attention == "gqa":
        return bytes_per_head_per_token(model, dtype) * model.kv_heads
    return model.layers * (model.kv_lora_rank + model.rope_dim) * dtype_bytes(dtype)


def check_tp(model: ModelSpec, tp: int) -> int:
    """Validate a TP degree for the model: GQA needs tp | kv_heads or kv_heads | tp."""
    int_at_least("tensor-parallel degree", tp, 1)
    if model.attention == "gqa" and model.kv_heads % tp and tp % model.kv_heads:
        raise TrafficError(f"TP {tp} does not split {model.kv_heads} kv heads of {model.name} evenly; "
                           f"expected a divisor or multiple of {model.kv_heads}")
    return tp


def heads_per_rank(model: ModelSpec, tp: int) -> int:
    """GQA kv heads one rank holds: max(1, kv_heads // tp)."""
    check_tp(model, tp)
    return max(1, model.kv_heads // tp)


def rank_heads(model: ModelSpec, tp: int, rank: int) -> range:
    """The GQA head ids a TP rank holds; with tp > kv_heads rank r holds head r*kv_heads//tp."""
    per = heads_per_rank(model, tp)
    if not 0 <= rank < tp:
        raise TrafficError(f"rank {rank!r} is outside TP {tp}; expected 0..{tp - 1}")
    first = rank * per if tp <= model.kv_heads else rank * model.kv_heads // tp
    return range(first, first + per)


def kv_bytes_per_token_per_rank(model: ModelSpec, dtype: str, tp: int) -> int:
    """KV bytes one token puts on ONE TP rank (GQA: its heads, replicas counted; MLA: all)."""
    check_tp(model, tp)
    if model.attention == "mla":
        return kv_bytes_per_token(model, dtype)
    return bytes_per_head_per_token(model, dtype) * heads_per_rank(model, tp)


__all__ = ["ModelSpec", "MODELS", "DTYPE_BYTES", "get_model", "custom_model", "dtype_bytes",
           "kv_bytes_per_token", "kv_bytes_per_token_per_rank", "heads_per_rank", "rank_heads",
           "bytes_per_head_per_token", "check_tp"]
