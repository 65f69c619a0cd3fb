"""Expert-parallel (EP) dispatch and combine messages of one MoE forward pass.

An EP group is a list of GPUs; the model's routed experts are placed on it
round-robin (expert e on ``group[e % len(group)]``, so every GPU holds
``routed_experts / len(group)`` of them; the group size must divide the expert
count). Shared experts run on every GPU (a replica each) and move nothing.

Per MoE layer, every source GPU has some tokens. Each token picks its top-k
(``experts_per_token``) routed experts, drawn WITHOUT replacement from the
expert-popularity distribution (Gumbel-top-k sampling, which is exactly
successive sampling without replacement in proportion to the weights):

* ``"uniform"``: every expert equally likely;
* ``"zipf"``: expert e (0-based id) has weight 1 / (e + 1) ** s, so expert 0 is
  the most popular; with round-robin placement the first GPU of the group
  holds the most popular expert of every round of ``len(group)`` experts, and
  destination loads drift apart as ``s`` grows (the uneven NIC loads of the
  seed's Fig. 4);
* an explicit list of ``routed_experts`` non-negative weights (e.g. measured
  expert loads, or a shuffled ranking).

Messages follow DeepEP's normal (high-throughput) kernels, which prefill uses:
a token goes ONCE to each distinct other GPU that holds at least one of its
chosen experts (``is_token_in_rank`` in DeepEP's dispatch layout), carrying
``hidden_size`` x the dispatch dtype (FP8: + one float32 scale per 128
channels); experts on the token's own GPU cost nothing. The combine is the
reverse direction: each such GPU returns one ``hidden_size`` x combine-dtype
vector per token (its experts' outputs reduced locally). Byte sizes come from
``ExpertSpec`` (traffic/model/models.py, sources there).

What this does not model: DeepEP's low-latency (decode) kernels send one
message per (token, chosen expert) rather than per (token, GPU); its internode
normal kernels send one RDMA copy per destination SERVER and forward inside
the server over NVLink. Pairs of GPUs on the same server are returned like
any other pair: which messages cross the fabric is the caller's choice (in a
real HGX server, intra-server ones ride NVLink).

One routing draw stands for every MoE layer (each layer moves the same
bytes); ``*_total`` multiplies by the model's MoE layer count. For routings
that differ per layer, call once per layer with seeds ``seed + layer``.
Results are deterministic for a given seed, group order and token counts.

Usage::

    t = ep_traffic([1, 2, 9, 10], 4096, "deepseek-v3", popularity="zipf", zipf_s=1.2, seed=0)
    t.dispatch_per_layer[(1, 9)]      # bytes GPU 1 -> GPU 9 in one MoE layer's dispatch
    t.combine_total[(9, 1)]           # bytes GPU 9 -> GPU 1 over all MoE layers' combines
    t.rows()                          # plain dicts, one per directed pair, for a CSV
    t.received("dispatch")            # bytes each GPU's NIC receives per layer
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from traffic.model._check import int_at_least, real_positive
from traffic.model.errors import TrafficError
from traffic.model.models import ExpertSpec, ModelSpec, get_model, moe_models

POPULARITIES = ("uniform", "zipf")
KINDS = ("dispatch", "combine")
_CHUNK_TOKENS = 4096  # tokens drawn at once (keeps the (tokens x experts) key matrix small)


def _moe_spec(model: ModelSpec | str) -> tuple[str, ExpertSpec]:
    spec = get_model(model) if isinstance(model, str) else model
    if not isinstance(spec, ModelSpec):
        raise TrafficError(f"model {model!r} is not allowed; expected a model name or a ModelSpec")
    if spec.expert is None:
        raise TrafficError(f"model {spec.name} is dense (no routed experts): it makes no expert-parallel "
                           f"traffic; expected an MoE model: {', '.join(moe_models())}")
    return spec.name, spec.expert


def _check_group(group: Sequence[int]) -> tuple[int, ...]:
    if isinstance(group, (str, bytes)) or not isinstance(group, Sequence) or not group:
        raise TrafficError(f"EP group {group!r} is not allowed; expected a non-empty list of GPU numbers")
    for g in group:
        if not isinstance(g, int) or isinstance(g, bool) or g < 1:
            raise TrafficError(f"EP group GPU {g!r} is not allowed; expected GPU numbers >= 1")
    seen: set[int] = set()
    for g in group:
        if g in seen:
            raise TrafficError(f"EP group {list(group)} lists GPU {g} twice; expected distinct GPU numbers")
        seen.add(g)
    return tuple(group)


def expert_owners(group: Sequence[int], routed_experts: int) -> list[int]:
    """The GPU holding each routed expert: expert e on ``group[e % len(group)]``."""
    gpus = _check_group(group)
    int_at_least("routed_experts", routed_experts, 1)
    if routed_experts % len(gpus):
        raise TrafficError(f"EP group of {len(gpus)} GPUs does not divide {routed_experts} routed experts; "
                           f"expected a group size dividing {routed_experts}")
    return [gpus[e % len(gpus)] for e in range(routed_experts)]


def expert_popularity(routed_experts: int, popularity: str | Sequence[float] = "uniform",
                      zipf_s: float = 1.0, experts_per_token: int = 1) -> list[float]:
    """Normalized popularity (probability of being drawn first) of each expert id."""
    int_at_least("routed_experts", routed_experts, 1)
    expected = (f"expected one of {', '.join(POPULARITIES)} or a list of {routed_experts} "
                "non-negative weights")
    if isinstance(popularity, str):
        if popularity == "uniform":
            weights = [1.0] * routed_experts
        elif popularity == "zipf":
            s = real_positive("zipf exponent s", zipf_s)
            weights = [1.0 / (e + 1) ** s for e in range(routed_experts)]
        else:
            raise TrafficError(f"expert popularity {popularity!r} is not known; {expected}")
    else:
        if not isinstance(popularity, Sequence) or len(popularity) != routed_experts:
            raise TrafficError(f"expert popularity {popularity!r} is not allowed; {expected}")
        for w in popularity:
            if (not isinstance(w, (int, float)) or isinstance(w, bool) or not math.isfinite(w)
                    or w < 0):
                raise TrafficError(f"expert popularity weight {w!r} is not allowed; {expected}")
        weights = [float(w) for w in popularity]
    positive = sum(1 for w in weights if w > 0)
    if positive < experts_per_token:
        raise TrafficError(f"expert popularity has {positive} experts with weight > 0; expected at least "
                           f"{experts_per_token} (experts per token)")
    total = sum(weights)
    return [w / total for w in weights]


def route_tokens(n_tokens: int, popularity: Sequence[float], experts_per_token: int,
                 rng: np.random.Generator) -> np.ndarray:
    """(n_tokens, k) expert ids, each row k distinct experts drawn without replacement.

    Gumbel-top-k: the k largest of log(p_e) + Gumbel noise are distributed as k
    successive draws without replacement in proportion to p.
    """
    p = np.asarray(popularity, dtype=float)
    with np.errstate(divide="ignore"):
        logp = np.where(p > 0, np.log(np.where(p > 0, p, 1.0)), -np.inf)
    k = experts_per_token
    out = np.empty((n_tokens, k), dtype=np.int64)
    for start in range(0, n_tokens, _CHUNK_TOKENS):
        n = min(_CHUNK_TOKENS, n_tokens - start)
        keys = logp + rng.gumbel(size=(n, p.size))
        if k == p.size:
            out[start:start + n] = np.arange(k)
        else:
            out[start:start + n] = np.argpartition(-keys, k - 1, axis=1)[:, :k]
    return out


@dataclass(frozen=True)
class ExpertTraffic:
    """Dispatch and combine bytes per directed GPU pair (src, dst), plain data.

    ``*_per_layer``: one MoE layer; ``*_total``: all ``moe_layers`` of them.
    ``dispatch_tokens[(a, b)]``: tokens of GPU a sent to GPU b in one layer's
    dispatch (each returns in the combine, so combine (b, a) carries as many).
    Pairs that exchange nothing are absent.
    """

    model: str
    group: tuple[int, ...]
    tokens: dict[int, int]
    popularity: str
    zipf_s: float
    seed: int
    experts_per_gpu: int
    moe_layers: int
    dispatch_bytes_per_token: int
    combine_bytes_per_token: int
    dispatch_tokens: dict[tuple[int, int], int]
    dispatch_per_layer: dict[tuple[int, int], int] = field(init=False)
    combine_per_layer: dict[tuple[int, int], int] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "dispatch_per_layer",
                           {pair: n * self.dispatch_bytes_per_token for pair, n in self.dispatch_tokens.items()})
        object.__setattr__(self, "combine_per_layer",
                           {(b, a): n * self.combine_bytes_per_token for (a, b), n in self.dispatch_tokens.items()})

    @property
    def dispatch_total(self) -> dict[tuple[int, int], int]:
        """Dispatch bytes per pair summed over the MoE layers."""
        return {pair: b * self.moe_layers for pair, b in self.dispatch_per_layer.items()}

    @property
    def combine_total(self) -> dict[tuple[int, int], int]:
        """Combine bytes per pair summed over the MoE layers."""
        return {pair: b * self.moe_layers for pair, b in self.combine_per_layer.items()}

    def received(self, kind: str = "dispatch", total: bool = False) -> dict[int, int]:
        """Bytes each GPU of the group receives (its NIC's inbound load), per layer or in total."""
        return self._per_gpu(kind, total, end=1)

    def sent(self, kind: str = "dispatch", total: bool = False) -> dict[int, int]:
        """Bytes each GPU of the group sends (its NIC's outbound load), per layer or in total."""
        return self._per_gpu(kind, total, end=0)

    def _per_gpu(self, kind: str, total: bool, end: int) -> dict[int, int]:
        """Bytes per GPU at one end of every pair (0: source, 1: destination)."""
        out = {g: 0 for g in self.group}
        for pair, b in self._per_layer(kind).items():
            out[pair[end]] += b
        return {g: b * (self.moe_layers if total else 1) for g, b in out.items()}

    def load_ratio(self, kind: str = "dispatch") -> float:
        """max / min bytes received over the group's GPUs (inf if one receives nothing)."""
        loads = list(self.received(kind).values())
        if max(loads) == 0:
            return 1.0
        return math.inf if min(loads) == 0 else max(loads) / min(loads)

    def rows(self) -> list[dict]:
        """One dict per directed pair that exchanges bytes, sorted by (src, dst), for a CSV."""
        pairs = sorted(set(self.dispatch_per_layer) | set(self.combine_per_layer))
        rows = []
        for src, dst in pairs:
            d = self.dispatch_per_layer.get((src, dst), 0)
            c = self.combine_per_layer.get((src, dst), 0)
            rows.append({"src": src, "dst": dst, "dispatch_tokens": self.dispatch_tokens.get((src, dst), 0),
                         "dispatch_bytes_per_layer": d, "combine_bytes_per_layer": c,
                         "dispatch_bytes": d * self.moe_layers, "combine_bytes": c * self.moe_layers})
        return rows

    def _per_layer(self, kind: str) -> dict[tuple[int, int], int]:
        if kind == "dispatch":
            return self.dispatch_per_layer
        if kind == "combine":
            return self.combine_per_layer
        raise TrafficError(f"message kind {kind!r} is not known; expected one of {', '.join(KINDS)}")


def _token_counts(tokens_per_gpu: int | Mapping[int, int], group: tuple[int, ...]) -> dict[int, int]:
    if isinstance(tokens_per_gpu, Mapping):
        if set(tokens_per_gpu) != set(group):
            raise TrafficError(f"tokens per GPU given for GPUs {sorted(tokens_per_gpu)}; expected exactly the "
                               f"EP group's GPUs {sorted(group)}")
        return {g: int_at_least(f"tokens of GPU {g}", tokens_per_gpu[g], 0) for g in group}
    int_at_least("tokens per GPU", tokens_per_gpu, 0)
    return {g: tokens_per_gpu for g in group}


def messages_from_routing(group: Sequence[int], routing: Mapping[int, Sequence[Sequence[int]]],
                          expert: ExpertSpec) -> dict[tuple[int, int], int]:
    """Tokens sent per directed pair in one layer's dispatch, from explicit routing.

    ``routing[g]`` lists, for each token of source GPU g, the ids of its chosen
    experts (distinct, 0 .. routed_experts - 1). A token counts once per other
    GPU holding at least one of them.
    """
    gpus = _check_group(group)
    owners = expert_owners(gpus, expert.routed_experts)
    if set(routing) - set(gpus):
        raise TrafficError(f"routing given for GPUs {sorted(set(routing) - set(gpus))} outside the EP group "
                           f"{list(gpus)}; expected source GPUs of the group")
    counts: dict[tuple[int, int], int] = {}
    for src in gpus:
        for chosen in routing.get(src, ()):
            ids = list(chosen)
            if len(set(ids)) != len(ids) or len(ids) != expert.experts_per_token or any(
                    not isinstance(e, (int, np.integer)) or not 0 <= e < expert.routed_experts for e in ids):
                raise TrafficError(f"token routing {ids!r} of GPU {src} is not allowed; expected "
                                   f"{expert.experts_per_token} distinct expert ids in 0..{expert.routed_experts - 1}")
            for dst in {owners[e] for e in ids} - {src}:
                counts[(src, dst)] = counts.get((src, dst), 0) + 1
    return counts


def ep_traffic(group: Sequence[int], tokens_per_gpu: int | Mapping[int, int], model: ModelSpec | str,
               popularity: str | Sequence[float] = "uniform", zipf_s: float = 1.0,
               seed: int = 0) -> ExpertTraffic:
    """Draw a seeded routing and return the EP messages of one MoE layer (see module docstring).

    ``tokens_per_gpu``: one count for every GPU, or {gpu: count} for each GPU
    of the group. ``zipf_s`` is used with ``popularity="zipf"``.
    """
    gpus = _check_group(group)
    name, expert = _moe_spec(model)
    int_at_least("seed", seed, 0)
    owners = expert_owners(gpus, expert.routed_experts)
    tokens = _token_counts(tokens_per_gpu, gpus)
    probs = expert_popularity(expert.routed_experts, popularity, zipf_s, expert.experts_per_token)
    owner_index = np.array([gpus.index(g) for g in owners], dtype=np.int64)
    rng = np.random.default_rng(seed)
    counts: dict[tuple[int, int], int] = {}
    for i, src in enumerate(gpus):
        n = tokens[src]
        if n == 0:
            continue
        chosen = route_tokens(n, probs, expert.experts_per_token, rng)
        hit = np.zeros((n, len(gpus)), dtype=bool)
        hit[np.arange(n)[:, None], owner_index[chosen]] = True
        per_dst = hit.sum(axis=0)
        for j, dst in enumerate(gpus):
            if j != i and per_dst[j]:
                counts[(src, dst)] = int(per_dst[j])
    label = popularity if isinstance(popularity, str) else "weights"
    return ExpertTraffic(name, gpus, tokens, label, float(zipf_s), seed,
                         expert.routed_experts // len(gpus), expert.moe_layers,
                         expert.dispatch_bytes_per_token, expert.combine_bytes_per_token, counts)


def ep_traffic_from_routing(group: Sequence[int], routing: Mapping[int, Sequence[Sequence[int]]],
                            model: ModelSpec | str) -> ExpertTraffic:
    """``ExpertTraffic`` for an explicit routing (``messages_from_routing``), e.g. a recorded one."""
    gpus = _check_group(group)
    name, expert = _moe_spec(model)
    counts = messages_from_routing(gpus, routing, expert)
    tokens = {g: len(routing.get(g, ())) for g in gpus}
    return ExpertTraffic(name, gpus, tokens, "explicit", 0.0, 0, expert.routed_experts // len(gpus),
                         expert.moe_layers, expert.dispatch_bytes_per_token, expert.combine_bytes_per_token,
                         counts)


PROBE_TOKENS = 4096  # tokens per GPU routed once to estimate each pair's share (HitTable)


class HitTable:
    """How many token copies GPU a sends GPU b per token of a, and each step's draw around it; per step the
    pair counts are binomial draws, which keeps a step's cost independent of its token count (prefill steps
    carry thousands of tokens).

    ``per_expert`` False: one copy per (token, destination GPU) holding any of its experts, as DeepEP's normal
    kernels send (prefill), the share from one seeded routing of ``PROBE_TOKENS`` tokens per GPU. True: one copy
    per (token, chosen expert), as its low-latency kernels send (decode): the expected experts per token on b,
    experts_per_token x b's share of the routing, exact from the popularity (no probe: at n = 16,384 the 512
    decode engines' probes took ~10 minutes for figures the popularity gives).
    """

    def __init__(self, group: tuple[int, ...], spec, seed: int, per_expert: bool) -> None:
        """``spec``: the serving cluster's ``ServingSpec`` (its model, popularity and Zipf exponent)."""
        expert = spec.model.expert
        k = expert.experts_per_token
        self.group = group
        self.per_expert = per_expert
        self.draws = k if per_expert else 1
        if per_expert:
            _check_group(group)
            int_at_least("seed", seed, 0)
            owners = expert_owners(group, expert.routed_experts)
            weights = expert_popularity(expert.routed_experts, spec.popularity, spec.zipf_s, k)
            on = {g: 0.0 for g in group}
            for e, g in enumerate(owners):
                on[g] += float(weights[e])
            total = sum(on.values())
            self.share = {(a, b): on[b] / total for a in group for b in group if a != b}
        else:
            probe = ep_traffic(group, PROBE_TOKENS, spec.model, spec.popularity, spec.zipf_s, seed)
            self.share = {pair: n / PROBE_TOKENS for pair, n in probe.dispatch_tokens.items()}
        self.dispatch_per_token = expert.dispatch_bytes_per_token * expert.moe_layers
        self.combine_per_token = expert.combine_bytes_per_token * expert.moe_layers
        self._pairs = list(self.share)
        index = {g: i for i, g in enumerate(group)}
        self._src = np.array([index[a] for a, _ in self._pairs], dtype=np.int64)  # each pair's source in group
        self._p = np.minimum(1.0, np.fromiter(self.share.values(), dtype=float, count=len(self._pairs)))

    def tokens(self, tokens_per_gpu: dict[int, int], rng: np.random.Generator) -> dict[tuple[int, int], int]:
        """Token copies GPU a sends GPU b in one step's dispatch (b returns as many in the combine): one binomial
        draw per pair whose source has tokens, in the pairs' order (one call for them all: the same draws)."""
        per_gpu = np.fromiter((tokens_per_gpu.get(g, 0) for g in self.group), dtype=np.int64, count=len(self.group))
        n = per_gpu[self._src] * self.draws
        live = np.flatnonzero(n)
        if not live.size:
            return {}
        drawn = rng.binomial(n[live], self._p[live])
        pairs = self._pairs
        return {pairs[i]: int(c) for i, c in zip(live.tolist(), drawn.tolist()) if c}


__all__ = ["ExpertTraffic", "ep_traffic", "ep_traffic_from_routing", "messages_from_routing",
           "expert_owners", "expert_popularity", "route_tokens", "HitTable", "POPULARITIES", "KINDS", "PROBE_TOKENS"]
