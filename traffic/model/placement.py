"""Where prefill and decode instances run, and which instance serves a request.

GPUs are numbered 1..n; GPU g is on server ceil(g / gpus_per_server) and has
local rank (g - 1) mod gpus_per_server (its rail / NIC on HGX nodes). A TP-t
instance takes t consecutive GPUs of one server, aligned to t, so t must
divide gpus_per_server. Only whole servers are placed and no server mixes
prefill and decode GPUs (KV then always crosses the network, which is what
the testbed measures).

Layouts:
* ``"split"``: prefill on the first servers, decode on the following ones.
* ``"interleaved"``: the prefill servers are spread evenly among the servers
  used (server positions floor(i * used / n_prefill_servers)), so with half
  prefill the servers go P, D, P, D, ...

Serving layouts (``SERVING_LAYOUTS``, the experiment's ``serving.layout``, MoE
models, the live driver): how a published deployment groups each kind's GPUs
into engines, mapped onto any number of whole servers by one rule per kind
(``EngineShape``); ``layout_engines`` builds them. docs/serving.md gives each
one's source and what could be verified of it.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from traffic.model._check import int_at_least, one_of, real_positive
from traffic.model.errors import TrafficError
from traffic.model.traces import Request

KINDS = ("prefill", "decode")
LAYOUTS = ("split", "interleaved")
POLICIES = ("round_robin", "least_loaded", "random")


def gpu_server(gpu: int, gpus_per_server: int = 8) -> int:
    """Server (1-based) of a GPU (1-based)."""
    int_at_least("gpu", gpu, 1)
    return math.ceil(gpu / gpus_per_server)


def gpu_local_rank(gpu: int, gpus_per_server: int = 8) -> int:
    """Local rank / rail (0-based) of a GPU (1-based) within its server."""
    int_at_least("gpu", gpu, 1)
    return (gpu - 1) % gpus_per_server


@dataclass(frozen=True)
class Instance:
    """A prefill or decode engine: its index among its kind and its GPUs (TP rank order)."""

    kind: str
    index: int
    gpus: tuple[int, ...]

    def __post_init__(self) -> None:
        one_of("instance kind", self.kind, KINDS)
        int_at_least("instance index", self.index, 0)
        if not self.gpus or any(not isinstance(g, int) or g < 1 for g in self.gpus):
            raise TrafficError(f"instance gpus {self.gpus!r} are not allowed; expected GPU numbers >= 1")
        if list(self.gpus) != list(range(self.gpus[0], self.gpus[0] + len(self.gpus))):
            raise TrafficError(f"instance gpus {self.gpus!r} are not consecutive; expected g, g+1, ...")

    @property
    def tp(self) -> int:
        """Tensor-parallel degree (number of GPUs)."""
        return len(self.gpus)

    def server(self, gpus_per_server: int = 8) -> int:
        """Server (1-based) that holds the instance."""
        return gpu_server(self.gpus[0], gpus_per_server)


@dataclass(frozen=True)
class Placement:
    """All instances of one deployment."""

    n_gpus: int
    gpus_per_server: int
    prefill: tuple[Instance, ...]
    decode: tuple[Instance, ...]
    layout: str


def _check_tp(name: str, tp: int, gpus_per_server: int) -> None:
    int_at_least(name, tp, 1)
    if gpus_per_server % tp:
        raise TrafficError(f"{name} {tp} does not divide gpus_per_server {gpus_per_server}; "
                           f"expected a divisor of {gpus_per_server}", key=name)


def place(n_gpus: int, prefill_tp: int, decode_tp: int, prefill_fraction: float = 0.5,
          n_prefill: int | None = None, n_decode: int | None = None,
          gpus_per_server: int = 8, layout: str = "split") -> Placement:
    """Place instances on whole servers.

    By default the first round(n_servers * prefill_fraction) servers (at least
    1, at most n_servers - 1, else an error) are filled with prefill instances
    and the rest with decode. Giving ``n_prefill`` and ``n_decode`` (instance
    counts) instead uses only the servers they need; leftover GPUs stay idle.
    """
    int_at_least("gpus_per_server", gpus_per_server, 1)
    int_at_least("n_gpus", n_gpus, 1)
    if n_gpus % gpus_per_server:
        raise TrafficError(f"n_gpus {n_gpus} is not whole servers; expected a multiple of "
                           f"gpus_per_server {gpus_per_server}", key="n_gpus")
    _check_tp("prefill_tp", prefill_tp, gpus_per_server)
    _check_tp("decode_tp", decode_tp, gpus_per_server)
    one_of("layout", layout, LAYOUTS)
    n_servers = n_gpus // gpus_per_server
    if (n_prefill is None) != (n_decode is None):
        raise TrafficError(f"n_prefill {n_prefill!r} / n_decode {n_decode!r}: only one given; "
                           "expected both instance counts or neither")
    if n_prefill is None:
        if n_servers < 2:
            raise TrafficError(f"n_gpus {n_gpus} is {n_servers} server; expected at least 2 servers "
                               "(prefill and decode never share a server)", key="n_gpus")
        fraction = real_positive("prefill_fraction", prefill_fraction)
        p_servers = math.floor(n_servers * fraction + 0.5)
        if not 1 <= p_servers <= n_servers - 1:
            raise TrafficError(f"prefill_fraction {prefill_fraction!r} of {n_servers} servers gives "
                               f"{p_servers} prefill servers; expected 1..{n_servers - 1} "
                               "(prefill and decode each need a server)", key="prefill_fraction")
        d_servers = n_servers - p_servers
        n_prefill = p_servers * gpus_per_server // prefill_tp
        n_decode = d_servers * gpus_per_server // decode_tp
    else:
        int_at_least("n_prefill", n_prefill, 1)
        int_at_least("n_decode", n_decode, 1)
        p_servers = math.ceil(n_prefill * prefill_tp / gpus_per_server)
        d_servers = math.ceil(n_decode * decode_tp / gpus_per_server)
        if p_servers + d_servers > n_servers:
            raise TrafficError(f"{n_prefill} prefill x TP{prefill_tp} + {n_decode} decode x TP{decode_tp} "
                               f"need {p_servers + d_servers} servers; expected at most {n_servers} "
                               f"({n_gpus} GPUs / {gpus_per_server})")
    used = p_servers + d_servers
    if layout == "split":
        p_pos = list(range(p_servers))
    else:
        p_pos = sorted({i * used // p_servers for i in range(p_servers)})
    d_pos = [s for s in range(used) if s not in set(p_pos)][:d_servers]
    prefill = _fill("prefill", p_pos, n_prefill, prefill_tp, gpus_per_server)
    decode = _fill("decode", d_pos, n_decode, decode_tp, gpus_per_server)
    return Placement(n_gpus, gpus_per_server, prefill, decode, layout)


def _fill(kind: str, servers: list[int], count: int, tp: int, gps: int) -> tuple[Instance, ...]:
    starts = [s * gps + 1 + k * tp for s in servers for k in range(gps // tp)]
    return tuple(Instance(kind, i, tuple(range(start, start + tp)))
                 for i, start in enumerate(starts[:count]))


@dataclass(frozen=True)
class Assignment:
    """The instances chosen for one request."""

    request_id: int
    prefill: Instance
    decode: Instance


class _Loads:
    """Outstanding load per instance: held amounts released at a known time (lazy heap)."""

    def __init__(self, n: int) -> None:
        self.total = [0.0] * n
        self.holds: dict[int, tuple[int, float]] = {}   # request_id -> (instance, amount)
        self.heap: list[tuple[float, int]] = []          # (release_s, request_id)

    def expire(self, now_s: float) -> None:
        while self.heap and self.heap[0][0] <= now_s:
            _, rid = heapq.heappop(self.heap)
            held = self.holds.pop(rid, None)
            if held is not None:
                self.total[held[0]] -= held[1]

    def hold(self, rid: int, instance: int, amount: float) -> None:
        if rid in self.holds:
            raise TrafficError(f"request_id {rid} assigned twice; expected unique request ids")
        self.holds[rid] = (instance, amount)
        self.total[instance] += amount

    def release_at(self, rid: int, at_s: float) -> None:
        if rid in self.holds:
            heapq.heappush(self.heap, (at_s, rid))


class Scheduler:
    """Pick a prefill and a decode instance for each request, deterministically.

    * ``round_robin``: separate cycles over prefill and decode instances.
    * ``random``: uniform choices from ``numpy.random.default_rng(seed)``.
    * ``least_loaded``: fewest outstanding tokens; prefill load is the input
      tokens not yet prefilled, decode load is the KV tokens (input + output,
      proportional to KV bytes for one model) still held. A request's load
      counts from ``assign`` until the time given to ``release`` (forever if
      never released). Ties go to the lowest index.
    """

    def __init__(self, policy: str = "round_robin", seed: int = 0) -> None:
        self.policy = one_of("scheduler policy", policy, POLICIES)
        self.seed = int_at_least("scheduler seed", seed, 0)
        self._rng = np.random.default_rng(seed)
        self._rr = [0, 0]
        self._loads: tuple[_Loads, _Loads] | None = None
        self._placement: Placement | None = None

    def assign(self, request: Request, placement: Placement, now_s: float | None = None) -> Assignment:
        """Choose instances for ``request`` at ``now_s`` (default its arrival time)."""
        if self._placement is None:
            self._placement = placement
            self._loads = (_Loads(len(placement.prefill)), _Loads(len(placement.decode)))
        elif placement is not self._placement:
            raise TrafficError("scheduler already bound to another placement; expected one "
                               "Scheduler per placement")
        assert self._loads is not None
        now = request.arrival_s if now_s is None else now_s
        picks = []
        for side, (instances, amount) in enumerate(
                ((placement.prefill, request.input_tokens),
                 (placement.decode, request.input_tokens + request.output_tokens))):
            if self.policy == "round_robin":
                choice = self._rr[side] % len(instances)
                self._rr[side] += 1
            elif self.policy == "random":
                choice = int(self._rng.integers(len(instances)))
            else:
                loads = self._loads[side]
                loads.expire(now)
                choice = min(range(len(instances)), key=lambda i: (loads.total[i], i))
            if self.policy == "least_loaded":
                self._loads[side].hold(request.request_id, choice, float(amount))
            picks.append(instances[choice])
        return Assignment(request.request_id, picks[0], picks[1])

    def release(self, request_id: int, prefill_done_s: float | None = None,
                decode_done_s: float | None = None) -> None:
        """Say when a request stops loading its prefill / decode instance."""
        if self._loads is None:
            return
        if prefill_done_s is not None:
            self._loads[0].release_at(request_id, prefill_done_s)
        if decode_done_s is not None:
            self._loads[1].release_at(request_id, decode_done_s)


ENGINE_FORMS = ("tp", "ep")


@dataclass(frozen=True)
class EngineShape:
    """How one kind's engines are cut from its servers.

    * ``tp``: every engine is one tensor-parallel instance of exactly ``servers`` whole servers
      (one unit; its MoE layers are sharded inside it, so no expert-parallel all-to-all).
    * ``ep``: every engine is one expert-parallel group with data-parallel attention (each GPU a
      unit) over ``k`` servers, ``k`` the largest divisor of the kind's servers not above
      ``servers`` (the published group size, capped by what the cluster has).
    """

    form: str
    servers: int

    def __post_init__(self) -> None:
        one_of("engine form", self.form, ENGINE_FORMS)
        int_at_least("engine servers", self.servers, 1)
        if self.form == "tp" and self.servers != 1:
            raise TrafficError(f"a tensor-parallel engine of {self.servers} servers is not supported; expected 1 "
                               "(an instance's GPUs are consecutive GPUs of one server)")

    def servers_per_engine(self, kind_servers: int) -> int:
        """Servers of one engine when the kind has ``kind_servers`` servers."""
        int_at_least("servers of a kind", kind_servers, 1)
        if self.form == "tp":
            return self.servers
        return max(d for d in range(1, min(self.servers, kind_servers) + 1) if kind_servers % d == 0)


@dataclass(frozen=True)
class ServingLayout:
    """A named deployment: the engine shape of each kind and where the shape was published."""

    name: str
    prefill: EngineShape
    decode: EngineShape
    source: str


SERVING_LAYOUTS: dict[str, ServingLayout] = {lay.name: lay for lay in (
    ServingLayout("glm5-recipe", EngineShape("tp", 1), EngineShape("ep", 2),
                  "NVIDIA Dynamo's GLM-5 recipe: TP4 prefill (one 4-GPU GB200 node), TP16/DP16/EP16 decode "
                  "(16 GPUs); on 8-GPU servers a prefill instance is one server (TP8, the SGLang cookbook's H200/B200 "
                  "FP8 setting) and a decode group two servers"),
    ServingLayout("single-node", EngineShape("tp", 1), EngineShape("ep", 1),
                  "NVIDIA Dynamo's GLM-5.2 H200 disaggregated recipe: TP8/EP8 prefill and TP8/DP8/EP1 decode, each in "
                  "one 8-GPU node (the fabric carries KV only)"),
    ServingLayout("large-ep", EngineShape("ep", 4), EngineShape("ep", 9),
                  "DeepSeek-V3/R1 inference system: prefill EP32 over 4 nodes, decode EP144 over 18; SGLang on 96 "
                  "H100s: prefill EP32 (4 nodes), decode EP72 (9 nodes); groups of up to 4 and 9 servers"),
    ServingLayout("two-server-ep", EngineShape("ep", 2), EngineShape("ep", 2),
                  "the layout of the runs before issue 24: each kind in EP groups of two servers (at n = 32: one "
                  "EP16 group per kind)"),
)}


def get_serving_layout(name: str) -> ServingLayout:
    """A serving layout by name."""
    if name not in SERVING_LAYOUTS:
        raise TrafficError(f"serving layout {name!r} is not known; expected one of {', '.join(SERVING_LAYOUTS)}")
    return SERVING_LAYOUTS[name]


def layout_engines(name: str, n_gpus: int, gpus_per_server: int = 8,
                   prefill_fraction: float = 0.5) -> dict[str, tuple[tuple[Instance, ...], ...]]:
    """{"prefill": engines, "decode": engines} of layout ``name`` on ``n_gpus``: the servers split by
    ``prefill_fraction`` as ``place`` splits them (prefill first), each kind's servers cut into engines by
    the layout's shape; an engine is a tuple of units (TP instances, or single GPUs of an EP group)."""
    lay = get_serving_layout(name)
    pl = place(n_gpus, 1, 1, prefill_fraction, gpus_per_server=gpus_per_server)
    out = {}
    for kind, instances, shape in (("prefill", pl.prefill, lay.prefill), ("decode", pl.decode, lay.decode)):
        gpus = [g for inst in instances for g in inst.gpus]
        per = shape.servers_per_engine(len(gpus) // gpus_per_server) * gpus_per_server
        groups = [gpus[i:i + per] for i in range(0, len(gpus), per)]
        if shape.form == "tp":
            out[kind] = tuple((Instance(kind, e, tuple(g)),) for e, g in enumerate(groups))
        else:
            out[kind] = tuple(tuple(Instance(kind, e * per + j, (gpu,)) for j, gpu in enumerate(g))
                              for e, g in enumerate(groups))
    return out


__all__ = ["Instance", "Placement", "Assignment", "Scheduler", "place", "gpu_server",
           "gpu_local_rank", "KINDS", "LAYOUTS", "POLICIES", "EngineShape", "ServingLayout", "SERVING_LAYOUTS",
           "ENGINE_FORMS", "get_serving_layout", "layout_engines"]
