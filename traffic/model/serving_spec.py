"""What a serving cluster is: its engines and every setting the cluster model (``traffic.model.serving``) runs
with, checked when it is made; times in real-cluster seconds, bytes real unless named."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from traffic.model._check import int_at_least, one_of, real_at_least, real_positive
from traffic.model.errors import TrafficError
from traffic.model.expert import expert_owners, expert_popularity
from traffic.model.memory import GPUS, kv_pool_tokens
from traffic.model.models import DTYPE_BYTES, ModelSpec
from traffic.model.placement import Instance
from traffic.model.prefix_cache import BLOCK_TOKENS, assumed_cached_tokens
from traffic.model.rankmap import MLA_SENDERS

ARRIVALS = ("trace", "closed")
ROUTINGS = ("kv", "least-loaded")  # how a request's prefill unit is chosen (traffic.model.serving's docstring)


@dataclass(frozen=True)
class ServingSpec:
    """Everything the cluster model needs; times in real-cluster seconds, bytes real unless named."""

    model: ModelSpec
    prefill: tuple[tuple[Instance, ...], ...]  # engines, each a tuple of units (TP instances)
    decode: tuple[tuple[Instance, ...], ...]
    dtype: str = "bf16"
    gpus_per_server: int = 8
    bytes_scale: float = 1.0  # real bytes per emulated byte
    chunk_bytes: int | None = 65_536  # emulated bytes per slice
    prefill_chunk_tokens: int = 8192  # per unit and step
    decode_batch: int = 256  # requests per unit and step
    decode_step_s: float = 0.030
    prefill_tokens_per_s_per_gpu: float | None = None  # None: the model's figure
    popularity: str = "uniform"
    zipf_s: float = 1.0
    seed: int = 0
    arrivals: str = "trace"
    concurrency: int = 64  # closed loop: requests (sessions) in flight in the whole cluster
    duration_s: float = 60.0  # no arrival and no step starts after this
    warmup_s: float = 0.0  # requests arriving earlier are not measured
    # prefix caching, KV memory and sessions (module docstring); every default leaves them off
    prefix_cache: bool = False  # a prefix cache per prefill unit, keyed by the requests' hash_ids
    prefix_hit: float | None = None  # the hit fraction of a request without hash_ids (None: 0)
    prefill_routing: str = "kv"  # ROUTINGS
    decode_prefix_cache: bool = False  # decode units cache blocks too; only the delta's KV moves
    decode_memory: bool = False  # a decode unit holds its requests' KV; a request waits until its KV fits
    gpu: str = "h200"  # traffic.model.memory.GPUS
    weights_dtype: str = "fp8"  # bytes a parameter (FP8 checkpoints)
    prefill_mem_fraction: float = 0.92  # SGLang mem_fraction_static (Dynamo's GLM-5.2 H200 recipe)
    decode_mem_fraction: float = 0.95
    prefix_cache_tokens: int | None = None  # a prefill unit's cache in tokens (None: from the GPU's memory)
    decode_kv_tokens: int | None = None  # a decode unit's KV pool in tokens (None: from the GPU's memory)
    think_s: float = 0.0  # closed loop: from a turn's last token to its session's next turn
    warm_start: bool = False  # closed loop: start as if serving for a while (Cluster._warm_start)
    hicache_ratio: float = 0.0  # prefix cache: a host-memory tier of this many times the GPU pool (SGLang HiCache)
    mla_sender: str = "rank0"  # MLA: which prefill ranks send a request's KV (traffic.model.rankmap.MLA_SENDERS)

    def __post_init__(self) -> None:
        if not self.prefill or not self.decode:
            raise TrafficError("a serving cluster needs at least one prefill and one decode engine")
        real_positive("bytes_scale", self.bytes_scale)
        if self.chunk_bytes is not None:
            int_at_least("chunk_bytes", self.chunk_bytes, 1)
        int_at_least("prefill_chunk_tokens", self.prefill_chunk_tokens, 1)
        int_at_least("decode_batch", self.decode_batch, 1)
        real_at_least("decode_step_s", self.decode_step_s, 0.0)
        one_of("arrivals", self.arrivals, ARRIVALS)
        int_at_least("concurrency", self.concurrency, 1)
        real_positive("duration_s", self.duration_s)
        real_at_least("warmup_s", self.warmup_s, 0.0)
        if self.warmup_s >= self.duration_s:
            raise TrafficError(f"warmup {self.warmup_s:g} s is not shorter than the duration "
                               f"{self.duration_s:g} s; expected warmup < duration", key="warmup_s")
        for name in ("prefix_cache", "decode_prefix_cache", "decode_memory", "warm_start"):
            if not isinstance(getattr(self, name), bool):
                raise TrafficError(f"{name} {getattr(self, name)!r} is not allowed; expected true or false", key=name)
        if self.prefix_hit is not None:
            assumed_cached_tokens(self.prefix_hit, 1)  # validates 0..1
        one_of("prefill_routing", self.prefill_routing, ROUTINGS)
        one_of("gpu", self.gpu, GPUS)
        one_of("weights_dtype", self.weights_dtype, DTYPE_BYTES)
        for name in ("prefill_mem_fraction", "decode_mem_fraction"):
            if real_positive(name, getattr(self, name)) > 1:
                raise TrafficError(f"{name} {getattr(self, name)!r} is not allowed; expected a fraction in (0, 1]",
                                   key=name)
        for name in ("prefix_cache_tokens", "decode_kv_tokens"):
            if getattr(self, name) is not None:
                int_at_least(name, getattr(self, name), BLOCK_TOKENS)
        real_at_least("think_s", self.think_s, 0.0)
        one_of("mla_sender", self.mla_sender, MLA_SENDERS)
        real_at_least("hicache_ratio", self.hicache_ratio, 0.0)

    @property
    def prefill_rate(self) -> float:
        """Prefill tokens/s of one GPU."""
        return self.prefill_tokens_per_s_per_gpu or self.model.prefill_tokens_per_s_per_gpu

    @property
    def expert_parallel(self) -> bool:
        return self.model.expert is not None


def unit_kv_tokens(spec: ServingSpec, kind: str, unit_gpus: int, engine_gpus: int) -> int:
    """Tokens of KV a unit of ``kind`` holds: a prefill unit's prefix cache, a decode unit's KV pool (the spec's
    figure, or what the GPU's memory leaves, ``traffic.model.memory.kv_pool_tokens``)."""
    given, fraction = ((spec.prefix_cache_tokens, spec.prefill_mem_fraction) if kind == "prefill" else
                       (spec.decode_kv_tokens, spec.decode_mem_fraction))
    return given or kv_pool_tokens(spec.model, spec.dtype, spec.weights_dtype, spec.gpu, fraction, unit_gpus,
                                   engine_gpus)


def check_fits(request_id: int, tokens: int, capacity: int) -> None:
    """A request's KV (input + output tokens) must fit a decode unit's pool, or it could never be admitted."""
    if tokens > capacity:
        raise TrafficError(f"request {request_id} needs {tokens} tokens of KV, more than a decode unit holds "
                           f"({capacity}); expected shorter requests or a decode unit with more memory",
                           key="decode_kv_tokens")


def check_serves(spec: ServingSpec, requests: Sequence) -> None:
    """What would stop a cluster of ``spec`` serving ``requests`` once it runs, checked without running it (the
    experiment's check, before any run directory exists): requests to serve, each expert-parallel group's
    experts (``traffic.model.expert``), the prefix caches' and decode pools' sizes, each request's KV against
    the smallest decode pool (``traffic.model.serving.Cluster`` applies the same rules as it runs)."""
    if not requests:
        raise TrafficError("no request to serve: the trace window is empty")
    if spec.expert_parallel:
        expert = spec.model.expert
        for engines in (spec.prefill, spec.decode):
            for units in engines:
                if len(units) > 1:  # an EP group (one TP instance has no all-to-all)
                    try:
                        expert_owners(tuple(g for u in units for g in u.gpus), expert.routed_experts)
                    except TrafficError as exc:
                        kind = units[0].kind
                        raise TrafficError(f"{kind} {exc}", key=f"{kind}_ep") from None
        expert_popularity(expert.routed_experts, spec.popularity, spec.zipf_s, expert.experts_per_token)
    sized = ([("prefill", spec.prefill)] if spec.prefix_cache else []) + (
        [("decode", spec.decode)] if spec.decode_memory or spec.decode_prefix_cache else [])
    pools = {kind: [unit_kv_tokens(spec, kind, len(u.gpus), sum(len(x.gpus) for x in units))
                    for units in engines for u in units] for kind, engines in sized}
    if spec.decode_memory:
        smallest = min(pools["decode"])
        for r in requests:
            check_fits(r.request_id, max(1, r.input_tokens) + max(1, r.output_tokens), smallest)


def build_engines(kind: str, instances: Sequence[Instance], ep: int | None) -> tuple[tuple[Instance, ...], ...]:
    """Engines of one kind from placed TP instances: each instance alone (dense), or EP groups of
    ``ep`` consecutive GPUs whose units are single GPUs (MoE, data-parallel attention)."""
    if ep is None:
        return tuple((inst,) for inst in instances)
    gpus = [g for inst in instances for g in inst.gpus]
    int_at_least(f"{kind} EP size", ep, 1)
    if len(gpus) % ep:
        raise TrafficError(f"{kind} EP size {ep} does not divide the {len(gpus)} {kind} GPUs; expected a divisor "
                           f"of {len(gpus)}", key=f"{kind}_ep")
    return tuple(tuple(Instance(kind, i * ep + j, (g,)) for j, g in enumerate(gpus[i * ep:(i + 1) * ep]))
                 for i in range(len(gpus) // ep))


def layout_summary(name: str | None, prefill: Sequence[Sequence[Instance]],
                   decode: Sequence[Sequence[Instance]]) -> dict:
    """What the engines are, for summaries and reports: {"name", "prefill": {"engines", "gpus", "form"},
    "decode": ...}; form "ep" is an EP group of single-GPU units, "tp" one instance (no all-to-all)."""
    out: dict = {"name": name}
    for kind, engines in (("prefill", prefill), ("decode", decode)):
        sizes = sorted({sum(len(u.gpus) for u in e) for e in engines})
        forms = sorted({"ep" if len(e) > 1 else "tp" for e in engines})
        out[kind] = {"engines": len(engines), "gpus": sizes[0] if len(sizes) == 1 else sizes,
                     "form": forms[0] if len(forms) == 1 else forms}
    return out


__all__ = ["ServingSpec", "build_engines", "layout_summary", "unit_kv_tokens", "check_fits", "check_serves", "ARRIVALS",
           "ROUTINGS"]
