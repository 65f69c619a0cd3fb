"""GPU memory for KV: how many tokens a prefill unit's prefix cache and a decode unit's KV pool hold.

A unit's KV pool, in tokens, is what SGLang sizes its pool from:

    (GPU memory x mem_fraction_static - the weights one GPU holds) / KV bytes a token on one GPU

* **GPU memory** (``GPUS``): H200 141 GB (the default: the GPU of NVIDIA
  Dynamo's GLM-5.2 H200 recipes and of SGLang's GLM-5 FP8 TP8 command), H100
  and H800 80 GB. Decimal gigabytes as the datasheets write them; the device
  reports a few percent more, which is left out (a slightly smaller pool).
* **mem_fraction_static**: the share of GPU memory SGLang gives weights and
  the KV pool (the rest: activations, CUDA graphs). NVIDIA Dynamo's
  disaggregated GLM-5.2 H200 recipe (ai-dynamo/dynamo,
  ``recipes/glm-5.2/sglang/disagg-h200-agentic/deploy.yaml``) sets
  ``mem-fraction-static: 0.92`` for prefill and ``0.95`` for decode, with
  ``kv-cache-dtype: fp8_e4m3``; they are ``ServingSpec``'s defaults.
* **weights per GPU** (``weights_per_gpu``), from the model's published
  parameter count and the weights' dtype (FP8 checkpoints: 1 B a parameter,
  e.g. zai-org/GLM-5-FP8, "744B-A40B"):
  - one tensor-parallel instance (a unit of several GPUs, or an engine of one
    unit): every weight is split over its GPUs, params x bytes / GPUs;
  - an expert-parallel group with data-parallel attention (single-GPU units):
    the routed experts are split over the group, everything else (attention,
    dense layers, shared experts, embeddings) is a full copy on every GPU:
    (routed / group GPUs + (params - routed)) x bytes. GLM-5's routed experts
    are 75 x 256 x 3 x 6144 x 2048 = 724.8 B parameters (``ExpertSpec.routed_params``).
* **KV bytes a token on one GPU**: ``kv_bytes_per_token_per_rank`` (MLA: the
  full latent on every TP rank).

GLM-5, FP8 weights, FP8 KV (61,464 B a token), H200:
prefill TP8 instance: 141 x 0.92 - 744 / 8 = 36.7 GB -> 597 k tokens;
decode EP16 GPU: 141 x 0.95 - (724.8 / 16 + 19.2) = 69.4 GB -> 1.13 M tokens.

A request's KV counts at full size in a pool (no sharing beyond the prefix
cache's blocks), and a prefill unit's pool is its prefix cache: the KV of
requests being prefilled is not set against it (a chunk of at most
``prefill_chunk_tokens`` a step, small against the pool).
"""

from __future__ import annotations

from dataclasses import dataclass

from traffic.model._check import int_at_least, one_of, real_positive
from traffic.model.errors import TrafficError
from traffic.model.models import DTYPE_BYTES, ModelSpec, kv_bytes_per_token_per_rank
from traffic.model.prefix_cache import BLOCK_TOKENS, PrefixCache


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: float
    source: str
    host_link_bytes_per_s: float = 64e9  # to host memory, one direction: PCIe Gen5 x16


# Host link: the H100/H200 SXM datasheets give "PCIe Gen5: 128 GB/s" (both directions together), so 64 GB/s
# one way: what loading a HiCache host-tier hit into the GPU is charged at (no overlap with compute assumed).
GPUS: dict[str, GpuSpec] = {g.name.lower(): g for g in (
    GpuSpec("H200", 141e9, "NVIDIA H200 datasheet: 141 GB HBM3e, PCIe Gen5 128 GB/s"),
    GpuSpec("H100", 80e9, "NVIDIA H100 SXM datasheet: 80 GB HBM3, PCIe Gen5 128 GB/s"),
    GpuSpec("H800", 80e9, "NVIDIA H800 SXM: 80 GB HBM3, PCIe Gen5 (the GPU of DeepSeek's V3/R1 serving system)"),
)}


def get_gpu(name: str) -> GpuSpec:
    return GPUS[one_of("gpu", name.lower() if isinstance(name, str) else name, GPUS)]


def weights_per_gpu(model: ModelSpec, unit_gpus: int, engine_gpus: int, weights_dtype: str) -> float:
    """Bytes of weights one GPU of a unit holds (module docstring)."""
    int_at_least("unit GPUs", unit_gpus, 1)
    int_at_least("engine GPUs", engine_gpus, unit_gpus)
    width = DTYPE_BYTES[one_of("weights dtype", weights_dtype, DTYPE_BYTES)]
    if model.params is None:
        raise TrafficError(f"model {model.name} has no parameter count in the table; expected one to size its "
                           "weights per GPU (or give the KV pool in tokens: prefix_cache_tokens, decode_kv_tokens)",
                           key="model")
    if unit_gpus > 1 or engine_gpus == 1 or model.expert is None:
        return model.params * width / unit_gpus
    routed = model.expert.routed_params
    return (routed / engine_gpus + (model.params - routed)) * width


def kv_pool_tokens(model: ModelSpec, kv_dtype: str, weights_dtype: str, gpu: str, mem_fraction: float,
                   unit_gpus: int, engine_gpus: int) -> int:
    """Tokens of KV a unit's pool holds (module docstring), rounded down to whole 512-token blocks."""
    real_positive("mem_fraction", mem_fraction)
    free = get_gpu(gpu).memory_bytes * mem_fraction - weights_per_gpu(model, unit_gpus, engine_gpus, weights_dtype)
    per_token = kv_bytes_per_token_per_rank(model, kv_dtype, unit_gpus)
    tokens = int(free // per_token) // BLOCK_TOKENS * BLOCK_TOKENS
    if tokens < BLOCK_TOKENS:
        raise TrafficError(f"{model.name} on {gpu} ({unit_gpus} of {engine_gpus} GPUs, {weights_dtype} weights) leaves "
                           f"{free / 1e9:.1f} GB at mem_fraction {mem_fraction:g}, under one 512-token block of "
                           f"KV; expected a unit whose weights fit", key="gpu")
    return tokens


class KVPool:
    """A decode unit's KV memory: the requests' allocations and (decode prefix cache) the cached blocks, in
    tokens; ``used`` never exceeds ``capacity``."""

    def __init__(self, capacity: int, cache: PrefixCache | None = None) -> None:
        int_at_least("KV pool capacity (tokens)", capacity, 1)
        self.capacity = capacity
        self.cache = cache
        self.committed = 0  # tokens allocated to requests
        self.peak = 0

    @property
    def used(self) -> int:
        return self.committed + (len(self.cache) * BLOCK_TOKENS if self.cache is not None else 0)

    def _note(self) -> None:
        self.peak = max(self.peak, self.used)
        if self.used > self.capacity:  # an invariant: fail loudly rather than report a wrong run
            raise TrafficError(f"KV pool holds {self.used} tokens, over its {self.capacity}")

    def try_allocate(self, tokens: int) -> bool:
        """Allocate ``tokens`` if they fit, evicting unpinned cached blocks as needed; False (nothing
        changed) if they do not."""
        room = self.capacity - self.committed - tokens
        if room < 0:
            return False
        if self.cache is not None:
            if self.cache.pinned * BLOCK_TOKENS > room:
                return False
            self.cache.trim(room // BLOCK_TOKENS)
        self.committed += tokens
        self._note()
        return True

    def free(self, tokens: int) -> None:
        self.committed -= tokens
        if self.committed < 0:
            raise TrafficError("KV pool freed more than it allocated")

    def insert(self, chain) -> None:
        """Cache a finished request's blocks in the room the allocations leave (evicting older blocks)."""
        if self.cache is None:
            return
        self.cache.capacity = (self.capacity - self.committed) // BLOCK_TOKENS
        self.cache.insert(chain)
        self._note()


__all__ = ["GpuSpec", "GPUS", "get_gpu", "weights_per_gpu", "kv_pool_tokens", "KVPool"]
