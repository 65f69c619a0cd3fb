"""Model shapes that decide how many KV-cache (and, for MoE models, expert-parallel) bytes a token makes.

No trace records KV bytes (data/traces/README.md), so they come from the
model shape:

* GQA: 2 (K and V) x layers x kv_heads x head_dim x bytes per value; a
  tensor-parallel rank holds max(1, kv_heads // tp) heads (when tp > kv_heads
  each head is replicated on tp // kv_heads ranks, as vLLM and SGLang do).
* MLA: layers x (kv_lora_rank + rope_dim) x bytes per value, and every TP rank
  holds the full copy. ``kv_heads``/``head_dim`` are unused (0 in the table).
* MLA with DeepSeek Sparse Attention (DSA: GLM-5; ``index_head_dim`` > 0) in
  FP8: the published cache layout, per layer ``dsa_fp8_layer_bytes``: the
  "FP8 with scale" latent of FlashMLA's sparse kernels (deepseek-ai/FlashMLA
  README: "each token's KV cache is 656 Bytes ... First 512 bytes: the
  quantized NoPE part, 512 float8_e4m3 values. Next 16 bytes: scale factors,
  4 float32 values ... Last 128 bytes: the RoPE part, 64 bfloat16 values"; the
  same comment in vLLM's ``flashmla_sparse.py``; SGLang's ``NSATokenToKVPool``
  takes that width as ``override_kv_cache_dim`` when the KV dtype is FP8), plus
  the indexer's key, which SGLang keeps FP8 with one float32 scale per 128
  values whatever the KV dtype (``sglang/srt/mem_cache/memory_pool.py``:
  ``index_k_with_scale_buffer``, uint8, ``index_head_dim + index_head_dim //
  quant_block_size * 4`` bytes a token and layer, ``quant_block_size`` 128;
  its pool sizing adds the same ``indexer_size_per_token`` to the cell size).
  GLM-5: (512 + 16 + 128) + (128 + 4) = 788 B a layer x 78 layers = 61,464 B.
  In BF16 the table keeps the MLA latent and rope alone, 78 x 576 x 2 B =
  89,856 B, SGLang's BF16 ``MLATokenToKVPool`` width (``kv_cache_dim =
  kv_lora_rank + qk_rope_head_dim``, 576, in the model dtype): what the
  default experiment has always used. SGLang's BF16 pool also holds the FP8
  indexer keys, 78 x 132 B = 10,296 B more (100,152 B a token,
  ``dsa_bf16_pool_bytes_per_token``); they are not counted in ``kv_bytes_per_token``
  for bf16 so that the bf16 results stay as they were.

``prefill_tokens_per_s_per_gpu`` figures are ROUGH ASSUMPTIONS for H100-class
GPUs, not measurements of ours: a TP-t instance is assumed to prefill
t x this many tokens/s (linear scaling, no queueing inside the batch). Sources
are orders of magnitude from public serving reports (dense 8B ~40k tokens/s
per GPU, dense 70B ~5k; SGLang's 96-H100 DeepSeek-V3 deployment reported
~52k prefill tokens/s per 8-GPU node, i.e. ~6.5k per GPU); the others are
scaled by active parameters. Override with ``dataclasses.replace(model,
prefill_tokens_per_s_per_gpu=...)`` or ``custom_model``.

Mixture-of-experts models carry an ``ExpertSpec`` (``model.expert``; None for
dense models, which make no expert-parallel traffic): the shape numbers the
expert-parallel (EP) dispatch and combine messages depend on. Every figure is
taken from the model's public ``config.json`` (keys ``hidden_size``,
``n_routed_experts``, ``num_experts_per_tok``, ``n_shared_experts``,
``num_hidden_layers`` and ``first_k_dense_replace``; MoE layers =
num_hidden_layers - first_k_dense_replace, the multi-token-prediction layer
not counted); the source of each is next to its table entry.

Wire dtypes of EP serving (DeepEP, the EP library SGLang and vLLM use): the
dispatch sends FP8 (e4m3) activations with one float32 scale per 128 channels,
the combine sends BF16. Sources: DeepEP README ("Following V3's configuration,
we tested with 8K tokens per batch, 7168 hidden dimensions, top 8 experts, FP8
dispatching, and BF16 combining"); DeepEP ``csrc/kernels/internode_ll.cu``
(``kNumPerChannels = 128``, ``num_scales = kHidden / kNumPerChannels``, FP8
message = ``kHidden + num_scales * sizeof(float)`` bytes of payload, BF16
message = ``kHidden * sizeof(nv_bfloat16)``); SGLang's DeepEP normal
dispatcher (``_DeepEPDispatcherImplNormal.dispatch_a`` in
``sglang/srt/layers/moe/token_dispatcher/deepep.py``: "hard code 128 block
quant, use fp8 communication", ``sglang_per_token_group_quant_fp8(hidden_states,
128)``). The 16-byte per-message header DeepEP's low-latency kernels add
(source index + 3 reserved ints) is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from traffic.model._check import int_at_least, one_of, real_positive
from traffic.model.errors import TrafficError

DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp8": 1}
ATTENTION_KINDS = ("gqa", "mla")
FP8_SCALE_BYTES = 4  # one float32 scale per group of channels (DeepEP, SGLang)


@dataclass(frozen=True)
class ExpertSpec:
    """The mixture-of-experts numbers the expert-parallel traffic depends on.

    ``moe_layers`` counts only the MoE layers (the first ``first_k_dense_replace``
    dense layers excluded). ``dispatch_dtype`` / ``combine_dtype`` are the wire
    dtypes of the two all-to-alls; an FP8 dispatch also carries one float32
    scale per ``scale_channels`` channels. Shared experts run on every GPU of
    the group (a replica each) and move no bytes.
    """

    hidden_size: int
    routed_experts: int
    experts_per_token: int
    shared_experts: int
    moe_layers: int
    dispatch_dtype: str = "fp8"
    # config.json's moe_intermediate_size: the width of one routed expert's FFN (0: not in the table); with it
    # ``routed_params`` sizes the expert weights an EP group shards (traffic.model.memory)
    moe_intermediate_size: int = 0
    combine_dtype: str = "bf16"
    scale_channels: int = 128

    def __post_init__(self) -> None:
        int_at_least("expert hidden_size", self.hidden_size, 1)
        int_at_least("routed_experts", self.routed_experts, 1)
        int_at_least("experts_per_token", self.experts_per_token, 1)
        int_at_least("shared_experts", self.shared_experts, 0)
        int_at_least("moe_layers", self.moe_layers, 1)
        one_of("dispatch dtype", self.dispatch_dtype, DTYPE_BYTES)
        one_of("combine dtype", self.combine_dtype, DTYPE_BYTES)
        int_at_least("scale_channels", self.scale_channels, 1)
        int_at_least("moe_intermediate_size", self.moe_intermediate_size, 0)
        if self.experts_per_token > self.routed_experts:
            raise TrafficError(f"experts_per_token {self.experts_per_token} is more than the "
                               f"{self.routed_experts} routed experts; expected 1..{self.routed_experts}")
        if self.dispatch_dtype == "fp8" and self.hidden_size % self.scale_channels:
            raise TrafficError(f"hidden_size {self.hidden_size} is not a multiple of scale_channels "
                               f"{self.scale_channels}; expected whole FP8 scale groups")

    @property
    def dispatch_bytes_per_token(self) -> int:
        """Bytes one token's activations take in one dispatch message (FP8: + scales)."""
        payload = self.hidden_size * DTYPE_BYTES[self.dispatch_dtype]
        if self.dispatch_dtype == "fp8":
            payload += self.hidden_size // self.scale_channels * FP8_SCALE_BYTES
        return payload

    @property
    def combine_bytes_per_token(self) -> int:
        """Bytes one token's expert output takes in one combine message."""
        return self.hidden_size * DTYPE_BYTES[self.combine_dtype]

    @property
    def routed_params(self) -> int:
        """Parameters of the routed experts: MoE layers x routed experts x 3 matrices (gate, up, down) of
        hidden_size x moe_intermediate_size each."""
        if not self.moe_intermediate_size:
            raise TrafficError("moe_intermediate_size is not in the table for this model; expected it to size "
                               "the routed experts' weights")
        return self.moe_layers * self.routed_experts * 3 * self.hidden_size * self.moe_intermediate_size


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
    expert: ExpertSpec | None = None
    index_head_dim: int = 0  # DSA indexer key width (MLA only; 0: no indexer)
    params: float | None = None  # total parameters, published (None: not in the table); weights per GPU

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise TrafficError(f"model name {self.name!r} is not allowed; expected a non-empty string")
        if self.expert is not None and not isinstance(self.expert, ExpertSpec):
            raise TrafficError(f"model {self.name} expert {self.expert!r} is not allowed; expected an "
                               "ExpertSpec or None (dense)")
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
        int_at_least(f"model {self.name} index_head_dim", self.index_head_dim, 0)
        if self.index_head_dim and self.attention != "mla":
            raise TrafficError(f"model {self.name}: index_head_dim {self.index_head_dim!r} given for a "
                               f"{self.attention} model; expected 0 (DSA indexers go with MLA)")
        if self.params is not None:
            real_positive(f"model {self.name} params", self.params)

    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model (it has an ``ExpertSpec``)."""
        return self.expert is not None


# Expert-parallel shapes, each figure from the model's public config.json. The
# index this was checked against held copies of the files and framework pages
# quoting them rather than every original page; what was read is named.
# DeepSeek-V3 (config.json of deepseek-ai/DeepSeek-V3, as copied verbatim in
#   e.g. cann-recipes-train's verl_patches/config.json; DeepSeek's own
#   inference/configs/config_671B.json agrees: dim 7168, n_layers 61,
#   n_dense_layers 3, n_routed_experts 256, n_shared_experts 1,
#   n_activated_experts 8): hidden_size 7168, n_routed_experts 256,
#   num_experts_per_tok 8, n_shared_experts 1, num_hidden_layers 61,
#   first_k_dense_replace 3 -> 58 MoE layers.
#   moe_intermediate_size 2048 (config_671B.json: moe_inter_dim 2048).
_DEEPSEEK_V3_EP = ExpertSpec(hidden_size=7168, routed_experts=256, experts_per_token=8,
                             shared_experts=1, moe_layers=61 - 3, moe_intermediate_size=2048)
# Kimi-K2 (config.json of moonshotai/Kimi-K2-Instruct, model_type kimi_k2, as
#   quoted field by field in a Kimi-K2 config walk-through and in the
#   text_config of Kimi-K2.5 copies; NVIDIA Megatron-Bridge KimiK2Provider: 61
#   layers, hidden 7168, 384 experts, top-8; model card: 61 layers, 1 dense):
#   hidden_size 7168, n_routed_experts 384, num_experts_per_tok 8,
#   n_shared_experts 1, num_hidden_layers 61, first_k_dense_replace 1 -> 60.
#   moe_intermediate_size 2048 (the kimi_k2 text_config as quoted in Kimi-K2.x copies).
_KIMI_K2_EP = ExpertSpec(hidden_size=7168, routed_experts=384, experts_per_token=8,
                         shared_experts=1, moe_layers=61 - 1, moe_intermediate_size=2048)
# GLM-4.5 (NVIDIA Megatron-Bridge GLM 4.5 page for zai-org/GLM-4.5: "92
#   transformer layers (first 3 dense, remaining 89 MoE)", 5120 hidden, 160
#   experts, top-8, a shared expert; zai-org/GLM-4.7's config.json, the same
#   glm4_moe shape: hidden_size 5120, n_routed_experts 160, num_experts_per_tok
#   8, n_shared_experts 1, first_k_dense_replace 3, num_hidden_layers 92; the
#   GLM-5 technical report's table: GLM-4.5 3 dense + 89 MoE layers, 1 shared
#   expert) -> 89 MoE layers.
#   MoE FFN hidden size 1536 (Megatron-Bridge's GLM 4.5 page: "MoE FFN hidden size: 1536").
_GLM_45_EP = ExpertSpec(hidden_size=5120, routed_experts=160, experts_per_token=8,
                        shared_experts=1, moe_layers=92 - 3, moe_intermediate_size=1536)
# GLM-5 (config.json of zai-org/GLM-5, model_type glm_moe_dsa, as mirrored by
#   huggingface.co/unsloth/GLM-5: hidden_size 6144, first_k_dense_replace 3;
#   NVIDIA NeMo AutoModel / Megatron-Bridge GLM-5 pages: 78 layers, hidden
#   6144, first 3 dense, 256 routed experts, top-8, one shared expert; the
#   GLM-5 technical report's table: 3 dense + 75 MoE layers): hidden_size
#   6144, n_routed_experts 256, num_experts_per_tok 8, n_shared_experts 1,
#   num_hidden_layers 78, first_k_dense_replace 3 -> 75 MoE layers.
#   moe_intermediate_size 2048 (glm_moe_dsa config.json, 78 layers, as quoted in vLLM's and other
#   repositories' GLM-5 test configs; DeepSeek-style GLM-5 inference config: moe_inter_dim 2048). The
#   routed experts are then 75 x 256 x 3 x 6144 x 2048 = 724.8 B of GLM-5's 744 B parameters.
_GLM_5_EP = ExpertSpec(hidden_size=6144, routed_experts=256, experts_per_token=8,
                       shared_experts=1, moe_layers=78 - 3, moe_intermediate_size=2048)


# ``params``: total parameters as the models are published and named (Llama 3.1 8B / 70B; Qwen3-32B's model
# card, 32.8B; GLM-4.5's README, "355 billion total parameters with 32 billion active"; DeepSeek-V3, 671B
# total, 37B active; GLM-5's README (zai-org/GLM-5): "744B parameters (40B active)", 744B-A40B for the BF16
# and FP8 checkpoints alike; Kimi-K2, "1 T-parameter MoE with 32 B activation"). They size the weights each
# GPU holds (traffic.model.memory), which only the KV-memory features use.
MODELS: dict[str, ModelSpec] = {m.name: m for m in (
    ModelSpec("llama-3.1-8b", "gqa", 32, 8, 128, prefill_tokens_per_s_per_gpu=40_000.0, params=8e9),
    ModelSpec("llama-3.1-70b", "gqa", 80, 8, 128, prefill_tokens_per_s_per_gpu=5_000.0, params=70e9),
    ModelSpec("qwen3-32b", "gqa", 64, 8, 128, prefill_tokens_per_s_per_gpu=10_000.0, params=32.8e9),
    # GLM-4.5: 355B MoE with 32B active parameters.
    ModelSpec("glm-4.5", "gqa", 92, 8, 128, prefill_tokens_per_s_per_gpu=8_000.0, expert=_GLM_45_EP,
              params=355e9),
    # DeepSeek-V3: 671B MoE, 37B active.
    ModelSpec("deepseek-v3", "mla", 61, 0, 0, kv_lora_rank=512, rope_dim=64,
              prefill_tokens_per_s_per_gpu=6_500.0, expert=_DEEPSEEK_V3_EP, params=671e9),
    # GLM-5: MLA with a DSA indexer (index_head_dim 128, config.json), 78 layers; FP8 KV in the published
    # DSA layout (module docstring), BF16 the latent and rope alone.
    ModelSpec("glm-5", "mla", 78, 0, 0, kv_lora_rank=512, rope_dim=64,
              prefill_tokens_per_s_per_gpu=5_000.0, expert=_GLM_5_EP, index_head_dim=128, params=744e9),
)}

# Models ``get_model`` knows that are not (yet) in MODELS: MODELS is the
# experiment schema's list of servable models (testbed/experiment/schema.py), and
# adding a name there changes experiments/schema.json.
EXTRA_MODELS: dict[str, ModelSpec] = {m.name: m for m in (
    # Kimi-K2: 1T MoE, 32B active; MLA like DeepSeek-V3 (config.json: 61 layers,
    # kv_lora_rank 512, qk_rope_head_dim 64). Prefill figure: DeepSeek-V3's
    # 6.5k scaled by active parameters (37B / 32B), an assumption like the rest.
    ModelSpec("kimi-k2", "mla", 61, 0, 0, kv_lora_rank=512, rope_dim=64,
              prefill_tokens_per_s_per_gpu=7_500.0, expert=_KIMI_K2_EP, params=1e12),
)}

ALL_MODELS: dict[str, ModelSpec] = {**MODELS, **EXTRA_MODELS}


def get_model(name: str) -> ModelSpec:
    """Look a model up by name (case-insensitive)."""
    key = name.lower() if isinstance(name, str) else name
    if key not in ALL_MODELS:
        raise TrafficError(f"model {name!r} is not known; expected one of {', '.join(ALL_MODELS)}")
    return ALL_MODELS[key]


def moe_models() -> list[str]:
    """Names of the known models that have an expert-parallel table entry."""
    return [name for name, m in ALL_MODELS.items() if m.expert is not None]


def custom_model(name: str, attention: str, layers: int, kv_heads: int = 0, head_dim: int = 0,
                 kv_lora_rank: int = 0, rope_dim: int = 0,
                 prefill_tokens_per_s_per_gpu: float = 10_000.0,
                 expert: ExpertSpec | None = None, index_head_dim: int = 0,
                 params: float | None = None) -> ModelSpec:
    """Build a validated model not in the table (GQA: kv_heads, head_dim; MLA: lora, rope, a DSA indexer's
    index_head_dim; MoE: expert; params: total parameters, for the weights per GPU)."""
    return ModelSpec(name, attention, layers, kv_heads, head_dim, kv_lora_rank, rope_dim,
                     prefill_tokens_per_s_per_gpu, expert, index_head_dim, params)


def dtype_bytes(dtype: str) -> int:
    """Bytes per KV value for a dtype name."""
    return DTYPE_BYTES[one_of("KV dtype", dtype, DTYPE_BYTES)]


def bytes_per_head_per_token(model: ModelSpec, dtype: str) -> int:
    """GQA: K and V of one kv head over all layers, for one token."""
    if model.attention != "gqa":
        raise TrafficError(f"model {model.name} is {model.attention}; expected a GQA model for per-head bytes")
    return 2 * model.layers * model.head_dim * dtype_bytes(dtype)


# The DSA cache's quantization groups (module docstring): FlashMLA's FP8 latent has one float32 scale per 128
# NoPE values and keeps the rope part in BF16; SGLang's indexer keys one float32 scale per 128 values.
DSA_QUANT_GROUP = 128
DSA_ROPE_BYTES = 2  # the rope part stays BF16 in the FP8 layout


def dsa_fp8_layer_bytes(model: ModelSpec) -> dict[str, int]:
    """One token's FP8 DSA cache in one layer, by part (module docstring): the FP8 NoPE latent, its float32
    scales, the BF16 rope part, the FP8 indexer key and its float32 scale."""
    if model.attention != "mla" or not model.index_head_dim:
        raise TrafficError(f"model {model.name} has no DSA indexer; expected an MLA model with index_head_dim")
    return {"nope": model.kv_lora_rank, "nope_scales": model.kv_lora_rank // DSA_QUANT_GROUP * FP8_SCALE_BYTES,
            "rope": model.rope_dim * DSA_ROPE_BYTES, "index_k": model.index_head_dim,
            "index_k_scales": model.index_head_dim // DSA_QUANT_GROUP * FP8_SCALE_BYTES}


def dsa_bf16_pool_bytes_per_token(model: ModelSpec) -> int:
    """What SGLang's BF16 pool holds a token of a DSA model: the BF16 latent and rope plus the FP8 indexer key
    with its scale, every layer (GLM-5: 78 x (1,152 + 132) = 100,152 B). Not what ``kv_bytes_per_token`` gives
    for bf16 (module docstring)."""
    parts = dsa_fp8_layer_bytes(model)
    return model.layers * ((model.kv_lora_rank + model.rope_dim) * DTYPE_BYTES["bf16"] + parts["index_k"]
                           + parts["index_k_scales"])


def kv_bytes_per_token(model: ModelSpec, dtype: str) -> int:
    """KV bytes one token adds to the whole model (one copy, no replication)."""
    if model.attention == "gqa":
        return bytes_per_head_per_token(model, dtype) * model.kv_heads
    if model.index_head_dim and dtype_bytes(dtype) == 1:  # FP8 DSA: the published layout
        return model.layers * sum(dsa_fp8_layer_bytes(model).values())
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


__all__ = ["ModelSpec", "ExpertSpec", "MODELS", "EXTRA_MODELS", "ALL_MODELS", "DTYPE_BYTES",
           "FP8_SCALE_BYTES", "DSA_QUANT_GROUP", "dsa_fp8_layer_bytes", "dsa_bf16_pool_bytes_per_token",
           "get_model", "moe_models", "custom_model", "dtype_bytes",
           "kv_bytes_per_token", "kv_bytes_per_token_per_rank", "heads_per_rank", "rank_heads",
           "bytes_per_head_per_token", "check_tp"]
