"""The serving cluster as an event machine, with the network outside it.

A prefill-decode disaggregated cluster of *engines*. An engine is a group of
GPUs that runs steps together: each step is modelled compute, then (MoE
models) the expert-parallel exchange of that step, dispatch then combine, over
the network, and the step ends when its slowest message has arrived. So a
slow network makes steps longer, and TTFT and output tokens/s move with it.

* MoE models (``model.expert``): an engine is an EP group of ``ep`` GPUs
  (consecutive, possibly spanning servers) with data-parallel attention: each
  GPU is one *unit* that owns its requests (DeepSeek / SGLang large-scale EP
  serving). Per step, GPU a sends GPU b the tokens of its batch routed to
  experts b holds (``traffic.model.expert`` sizes, aggregated over the MoE layers:
  one dispatch and one combine message per pair and step). Pairs on one
  server ride NVLink and are not put on the fabric (counted as
  ``nvlink_bytes``).
* Dense models: an engine is one tensor-parallel instance (one unit), no EP.

A request: arrives (trace time, or closed loop: when an earlier one ends) ->
waits in its prefill unit's queue -> prefill steps (chunked, at most
``prefill_chunk_tokens`` per unit per step; compute = the unit's tokens / (the
model's prefill tokens/s per GPU x the unit's GPUs), the step lasting as long
as its slowest unit) -> KV transfer to its decode unit (``rankmap`` pairs, cut
into ``chunk_bytes`` slices) -> joins the decode batch at the next step ->
one output token per decode step (compute = ``decode_step_s``, flat: decode is
memory-bound at these batch sizes) -> done after its output tokens.
TTFT = first token - arrival = prefill queue + prefill + KV transfer + wait for
a step + the first step. Each request records these parts as they happen
(``RequestState``: the prefill queue, the compute and the EP exchange of the
prefill steps it was in, the KV transfer, the wait for a decode step and that
step's compute and exchange), so they add up to its TTFT exactly;
``traffic.model.breakdown`` summarizes them for a run.

The core is clock-free and network-free: ``start``, ``timer`` and
``delivered`` take the current time in real-cluster seconds and return
actions (``Send`` a message, set a ``Timer``). ``traffic.runtime.coordinator`` runs it
against the emulated fabric; ``run_ideal`` against an ideal network (for
tests, and as the reference an exchange is compared with).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from traffic.model._check import int_at_least, one_of, real_at_least, real_positive
from traffic.model.errors import TrafficError
from traffic.model.expert import ep_traffic, expert_owners, expert_popularity
from traffic.model.models import ModelSpec
from traffic.model.placement import Instance, gpu_server
from traffic.model.rankmap import kv_transfers
from traffic.model.traces import Request

ARRIVALS = ("trace", "closed")
KINDS = ("kv", "dispatch", "combine")
# the parts of a request's TTFT, in the order they happen (RequestState's *_s fields of the same names)
TTFT_PARTS = ("prefill_queue", "prefill_compute", "prefill_exchange", "kv_transfer", "decode_wait",
              "decode_compute", "decode_exchange")
STEP_PARTS = ("compute", "dispatch", "combine")  # a decode step's parts
_PROBE_TOKENS = 4096  # tokens per GPU routed once to estimate each pair's share (see _HitTable)


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
    concurrency: int = 64  # closed loop: requests in flight in the whole cluster
    duration_s: float = 60.0  # no arrival and no step starts after this
    warmup_s: float = 0.0  # requests arriving earlier are not measured

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
                               f"{self.duration_s:g} s; expected warmup < duration")

    @property
    def prefill_rate(self) -> float:
        """Prefill tokens/s of one GPU."""
        return self.prefill_tokens_per_s_per_gpu or self.model.prefill_tokens_per_s_per_gpu

    @property
    def expert_parallel(self) -> bool:
        return self.model.expert is not None


def build_engines(kind: str, instances: Sequence[Instance], ep: int | None) -> tuple[tuple[Instance, ...], ...]:
    """Engines of one kind from placed TP instances: each instance alone (dense), or EP groups of
    ``ep`` consecutive GPUs whose units are single GPUs (MoE, data-parallel attention)."""
    if ep is None:
        return tuple((inst,) for inst in instances)
    gpus = [g for inst in instances for g in inst.gpus]
    int_at_least(f"{kind} EP size", ep, 1)
    if len(gpus) % ep:
        raise TrafficError(f"{kind} EP size {ep} does not divide the {len(gpus)} {kind} GPUs; expected a divisor "
                           f"of {len(gpus)}")
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


@dataclass(frozen=True, slots=True)
class Message:
    """One message the network must carry: emulated ``bytes`` from src to dst GPU."""

    id: int
    kind: str  # kv | dispatch | combine
    src_gpu: int
    dst_gpu: int
    bytes: int
    real_bytes: int
    request_id: int | None
    engine: str  # e.g. "decode0"
    step: int | None
    slice_index: int = 0


@dataclass(frozen=True, slots=True)
class Send:
    message: Message


@dataclass(frozen=True, slots=True)
class Timer:
    at: float
    key: tuple


@dataclass
class RequestState:
    """One request's life; times in real-cluster seconds, None until they happen."""

    id: int
    arrival_s: float
    input_tokens: int
    output_tokens: int
    prefill_unit: tuple[int, int] | None = None  # (engine, unit)
    decode_unit: tuple[int, int] | None = None
    prefilled_tokens: int = 0
    prefill_start_s: float | None = None
    prefill_end_s: float | None = None
    kv_bytes: int = 0
    kv_pending: int = 0
    kv_end_s: float | None = None
    first_token_s: float | None = None
    done_s: float | None = None
    tokens_out: int = 0
    # TTFT's parts (TTFT_PARTS), attributed as they happen: every moment from arrival to the end of
    # prefill is the queue or a prefill step the request was in (its compute, then its exchange)
    prefill_queue_s: float = 0.0
    prefill_compute_s: float = 0.0
    prefill_exchange_s: float = 0.0
    decode_wait_s: float | None = None
    decode_compute_s: float | None = None
    decode_exchange_s: float | None = None
    attributed_to_s: float | None = None  # the time up to which the prefill parts account for it

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def kv_transfer_s(self) -> float | None:
        return None if self.kv_end_s is None or self.prefill_end_s is None else self.kv_end_s - self.prefill_end_s

    def parts(self) -> dict[str, float] | None:
        """TTFT_PARTS in seconds (None before the first token); they add up to ``ttft_s``."""
        if self.first_token_s is None:
            return None
        return {"prefill_queue": self.prefill_queue_s, "prefill_compute": self.prefill_compute_s,
                "prefill_exchange": self.prefill_exchange_s, "kv_transfer": self.kv_transfer_s,
                "decode_wait": self.decode_wait_s, "decode_compute": self.decode_compute_s,
                "decode_exchange": self.decode_exchange_s}

    def row(self) -> dict:
        return {"request_id": self.id, "arrival_s": self.arrival_s, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens, "tokens_out": self.tokens_out,
                "prefill_engine": None if self.prefill_unit is None else self.prefill_unit[0],
                "decode_engine": None if self.decode_unit is None else self.decode_unit[0],
                "prefill_start_s": self.prefill_start_s, "prefill_end_s": self.prefill_end_s,
                "kv_bytes": self.kv_bytes, "kv_end_s": self.kv_end_s, "first_token_s": self.first_token_s,
                "done_s": self.done_s, "ttft_s": self.ttft_s,
                **{f"{k}_s": v for k, v in (self.parts() or dict.fromkeys(TTFT_PARTS)).items()}}


@dataclass
class StepRecord:
    """One engine step: when its phases ended and what it carried."""

    engine: str
    step: int
    start_s: float
    tokens: int
    requests: int
    compute_end_s: float | None = None
    dispatch_end_s: float | None = None
    end_s: float | None = None
    ep_bytes: int = 0  # real bytes on the fabric
    nvlink_bytes: int = 0  # real bytes between GPUs of one server (not emulated)
    messages: int = 0
    dispatch_last_id: int | None = None  # the message whose arrival ended the dispatch (the phase's slowest)
    combine_last_id: int | None = None

    def row(self) -> dict:
        exchange = None if self.end_s is None or self.compute_end_s is None else self.end_s - self.compute_end_s
        return {"engine": self.engine, "step": self.step, "start_s": self.start_s,
                "compute_end_s": self.compute_end_s, "dispatch_end_s": self.dispatch_end_s, "end_s": self.end_s,
                "exchange_s": exchange, "tokens": self.tokens, "requests": self.requests,
                "ep_bytes": self.ep_bytes, "nvlink_bytes": self.nvlink_bytes, "messages": self.messages,
                "dispatch_last_id": self.dispatch_last_id, "combine_last_id": self.combine_last_id}


class _HitTable:
    """How many token copies GPU a sends GPU b per token of a, from one seeded routing of
    ``_PROBE_TOKENS`` tokens per GPU; per step the pair counts are binomial draws around it, which
    keeps a step's cost independent of its token count (prefill steps carry thousands of tokens).

    ``per_expert`` False: one copy per (token, destination GPU) holding any of its experts, as
    DeepEP's normal kernels send (prefill). True: one copy per (token, chosen expert), as its
    low-latency kernels send (decode): the expected experts per token on b, experts_per_token x
    b's share of the routing.
    """

    def __init__(self, group: tuple[int, ...], spec: ServingSpec, seed: int, per_expert: bool) -> None:
        probe = ep_traffic(group, _PROBE_TOKENS, spec.model, spec.popularity, spec.zipf_s, seed)
        k = spec.model.expert.experts_per_token
        self.group = group
        self.per_expert = per_expert
        self.draws = k if per_expert else 1
        if per_expert:
            owners = expert_owners(group, spec.model.expert.routed_experts)
            weights = expert_popularity(spec.model.expert.routed_experts, spec.popularity, spec.zipf_s, k)
            on = {g: 0.0 for g in group}
            for e, g in enumerate(owners):
                on[g] += float(weights[e])
            total = sum(on.values())
            self.share = {(a, b): on[b] / total for a in group for b in group if a != b}
        else:
            self.share = {pair: n / _PROBE_TOKENS for pair, n in probe.dispatch_tokens.items()}
        self.dispatch_per_token = probe.dispatch_bytes_per_token * probe.moe_layers
        self.combine_per_token = probe.combine_bytes_per_token * probe.moe_layers

    def tokens(self, tokens_per_gpu: dict[int, int], rng: np.random.Generator) -> dict[tuple[int, int], int]:
        """Token copies GPU a sends GPU b in one step's dispatch (b returns as many in the combine)."""
        out = {}
        for (a, b), p in self.share.items():
            n = tokens_per_gpu.get(a, 0)
            if n:
                c = int(rng.binomial(n * self.draws, min(1.0, p)))
                if c:
                    out[(a, b)] = c
        return out


@dataclass
class _Engine:
    kind: str
    index: int
    units: tuple[Instance, ...]
    hits: _HitTable | None
    queue: list[list[RequestState]] = field(default_factory=list)  # per unit
    step: StepRecord | None = None
    batch: list[list[RequestState]] = field(default_factory=list)  # per unit, this step's requests
    taken: list[dict[int, int]] = field(default_factory=list)  # prefill: tokens per request this step
    pending: int = 0  # messages of the phase in flight
    phase: str = "idle"
    steps: int = 0
    busy_s: float = 0.0
    work_s: float = 0.0  # unit-seconds of compute the steps needed (unit tokens / unit rate, summed)

    @property
    def name(self) -> str:
        return f"{self.kind}{self.index}"

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(g for u in self.units for g in u.gpus)


class Cluster:
    """The event machine (see module docstring)."""

    def __init__(self, spec: ServingSpec, requests: Sequence[Request]) -> None:
        if not requests:
            raise TrafficError("no request to serve: the trace window is empty")
        self.spec = spec
        self.rng = np.random.default_rng(spec.seed)
        self.source = list(requests)
        self.next_source = 0
        self.requests: dict[int, RequestState] = {}
        self.steps: list[StepRecord] = []
        self.messages: dict[int, Message] = {}
        self.sent_at: dict[int, float] = {}
        self.delivered_at: dict[int, float] = {}
        self._owner: dict[int, tuple[str, object]] = {}  # message id -> ("engine", engine) | ("kv", request)
        self._next_id = 0
        self._serial = 0  # closed loop: request ids of later rounds of the trace
        seed = spec.seed
        self.engines: dict[str, list[_Engine]] = {}
        for kind, groups in (("prefill", spec.prefill), ("decode", spec.decode)):
            engines = []
            for i, units in enumerate(groups):
                gpus = tuple(g for u in units for g in u.gpus)
                # an EP group of several units exchanges tokens; one TP instance (dense, or an MoE model's
                # experts sharded inside it) has no all-to-all
                hits = _HitTable(gpus, spec, seed + 7919 * (len(engines) + 1) + (kind == "decode"),
                                 per_expert=kind == "decode") if spec.expert_parallel and len(units) > 1 else None
                engines.append(_Engine(kind, i, units, hits, [[] for _ in units], batch=[[] for _ in units]))
            self.engines[kind] = engines
        self.stopped = False

    # -- events -----------------------------------------------------------------------------
    def start(self, now: float = 0.0) -> list:
        """Admit the first requests: the whole trace's arrival timers, or ``concurrency`` at once."""
        out: list = [Timer(self.spec.duration_s, ("end",))]
        if self.spec.arrivals == "closed":
            for _ in range(self.spec.concurrency):
                out += self._arrive(self._draw(), now)
        else:
            base = min(r.arrival_s for r in self.source)
            for r in self.source:
                if r.arrival_s - base < self.spec.duration_s:
                    out.append(Timer(r.arrival_s - base, ("arrive", r.request_id)))
            self._by_id = {r.request_id: r for r in self.source}
        return out

    def timer(self, key: tuple, now: float) -> list:
        """A timer the runner set has fired."""
        if key[0] == "end":
            self.stopped = True
            return []
        if key[0] == "arrive":
            return [] if self.stopped else self._arrive(self._by_id[key[1]], now)
        if key[0] == "compute":
            kind, index = key[1], key[2]
            return self._compute_done(self.engines[kind][index], now)
        raise TrafficError(f"unknown timer {key!r}")

    def delivered(self, message_id: int, now: float) -> list:
        """Message ``message_id`` has fully arrived (verified) at ``now``."""
        if message_id in self.delivered_at:
            return []
        self.delivered_at[message_id] = now
        what, owner = self._owner.pop(message_id)
        if what == "kv":
            req = owner
            req.kv_pending -= 1
            if req.kv_pending == 0:
                return self._kv_arrived(req, now)
            return []
        eng = owner
        eng.pending -= 1
        if eng.pending:
            return []
        if eng.phase == "dispatch":
            eng.step.dispatch_last_id = message_id
        else:
            eng.step.combine_last_id = message_id
        return self._phase_done(eng, now)

    @property
    def in_flight(self) -> int:
        """Messages sent and not yet delivered."""
        return len(self._owner)

    @property
    def quiet(self) -> bool:
        """Stopped, every step finished and nothing in flight: nothing more will happen."""
        return self.stopped and not self._owner and all(e.phase == "idle" for es in self.engines.values()
                                                         for e in es)

    # -- requests ---------------------------------------------------------------------------
    def _draw(self) -> Request:
        """The next request of the trace for the closed loop (the trace again from its start when used up)."""
        r = self.source[self.next_source % len(self.source)]
        rounds = self.next_source // len(self.source)
        self.next_source += 1
        if rounds:
            r = Request(r.request_id + rounds * 10 ** 9, r.arrival_s, r.input_tokens, r.output_tokens)
        return r

    def _arrive(self, r: Request, now: float) -> list:
        if r.request_id in self.requests:
            raise TrafficError(f"request_id {r.request_id} arrived twice; expected unique request ids")
        req = RequestState(r.request_id, now, max(1, r.input_tokens), max(1, r.output_tokens))
        req.attributed_to_s = now
        self.requests[req.id] = req
        eng, unit = self._least_loaded("prefill", lambda e, u: sum(x.input_tokens - x.prefilled_tokens
                                                                   for x in e.queue[u]))
        req.prefill_unit = (eng.index, unit)
        eng.queue[unit].append(req)
        return self._maybe_step(eng, now)

    def _least_loaded(self, kind: str, load) -> tuple[_Engine, int]:
        best = None
        for eng in self.engines[kind]:
            for u in range(len(eng.units)):
                key = (load(eng, u), eng.index, u)
                if best is None or key < best[0]:
                    best = (key, eng, u)
        return best[1], best[2]

    def _decode_load(self, eng: _Engine, u: int) -> int:
        return len(eng.queue[u]) + sum(1 for _ in eng.batch[u])

    def _send_kv(self, req: RequestState, now: float) -> list:
        peng = self.engines["prefill"][req.prefill_unit[0]]
        src = peng.units[req.prefill_unit[1]]
        deng, du = self._least_loaded("decode", self._decode_load)
        req.decode_unit = (deng.index, du)
        dst = deng.units[du]
        out = []
        pairs = kv_transfers(req.input_tokens, self.spec.model, self.spec.dtype,
                             Instance("prefill", 0, src.gpus), Instance("decode", 0, dst.gpus), req.id)
        for tr in pairs:
            req.kv_bytes += tr.bytes
            if tr.src_gpu == tr.dst_gpu:
                continue
            out += self._messages("kv", tr.src_gpu, tr.dst_gpu, tr.bytes, req.id, f"prefill{peng.index}", None,
                                  ("kv", req), now)
        req.kv_pending = sum(1 for a in out if isinstance(a, Send))
        if req.kv_pending == 0:
            return self._kv_arrived(req, now)
        return out

    def _kv_arrived(self, req: RequestState, now: float) -> list:
        req.kv_end_s = now
        eng = self.engines["decode"][req.decode_unit[0]]
        eng.queue[req.decode_unit[1]].append(req)
        return self._maybe_step(eng, now)

    def _finish(self, req: RequestState, now: float) -> list:
        req.done_s = now
        if self.spec.arrivals == "closed" and not self.stopped:
            return self._arrive(self._draw(), now)
        return []

    # -- steps ------------------------------------------------------------------------------
    def _maybe_step(self, eng: _Engine, now: float) -> list:
        if eng.phase != "idle" or self.stopped or not any(eng.queue):
            return []
        eng.steps += 1
        if eng.kind == "prefill":
            return self._start_prefill(eng, now)
        return self._start_decode(eng, now)

    def _start_prefill(self, eng: _Engine, now: float) -> list:
        eng.taken = []
        tokens = []
        compute = 0.0
        for u, unit in enumerate(eng.units):
            budget = self.spec.prefill_chunk_tokens
            took: dict[int, int] = {}
            for req in eng.queue[u]:
                if budget == 0:
                    break
                n = min(budget, req.input_tokens - req.prefilled_tokens)
                if req.prefill_start_s is None:
                    req.prefill_start_s = now
                req.prefill_queue_s += now - req.attributed_to_s  # waited since arrival or its last step
                took[req.id] = n
                budget -= n
            eng.taken.append(took)
            tokens.append(sum(took.values()))
            need = tokens[-1] / (self.spec.prefill_rate * len(unit.gpus))
            eng.work_s += need
            compute = max(compute, need)
        return self._begin(eng, now, compute, tokens, sum(len(t) for t in eng.taken))

    def _start_decode(self, eng: _Engine, now: float) -> list:
        for u in range(len(eng.units)):
            room = self.spec.decode_batch - len(eng.batch[u])
            if room > 0 and eng.queue[u]:
                for req in eng.queue[u][:room]:
                    req.decode_wait_s = now - req.kv_end_s
                eng.batch[u] += eng.queue[u][:room]
                del eng.queue[u][:room]
        tokens = [len(b) for b in eng.batch]
        return self._begin(eng, now, self.spec.decode_step_s, tokens, sum(tokens))

    def _begin(self, eng: _Engine, now: float, compute: float, tokens: list[int], n_requests: int) -> list:
        eng.phase = "compute"
        eng.step = StepRecord(eng.name, eng.steps, now, sum(tokens), n_requests)
        eng.step_tokens = tokens
        self.steps.append(eng.step)
        return [Timer(now + compute, ("compute", eng.kind, eng.index))]

    def _compute_done(self, eng: _Engine, now: float) -> list:
        eng.step.compute_end_s = now
        eng.phase = "dispatch"
        if eng.hits is None:
            return self._step_done(eng, now)
        per_gpu = {}
        for unit, n in zip(eng.units, eng.step_tokens):
            for g in unit.gpus:
                per_gpu[g] = n
        eng.step_pairs = eng.hits.tokens(per_gpu, self.rng)
        return self._exchange(eng, now, "dispatch", eng.hits.dispatch_per_token)

    def _exchange(self, eng: _Engine, now: float, kind: str, per_token: int) -> list:
        out = []
        gps = self.spec.gpus_per_server
        for (a, b), n in sorted(eng.step_pairs.items()):
            src, dst = (a, b) if kind == "dispatch" else (b, a)
            real = n * per_token
            if gpu_server(src, gps) == gpu_server(dst, gps):
                eng.step.nvlink_bytes += real
                continue
            eng.step.ep_bytes += real
            out += self._messages(kind, src, dst, real, None, eng.name, eng.step.step, ("engine", eng), now)
        eng.pending = sum(1 for a in out if isinstance(a, Send))
        eng.step.messages += eng.pending
        if eng.pending == 0:
            return out + self._phase_done(eng, now)
        return out

    def _phase_done(self, eng: _Engine, now: float) -> list:
        if eng.phase == "dispatch":
            eng.step.dispatch_end_s = now
            eng.phase = "combine"
            return self._exchange(eng, now, "combine", eng.hits.combine_per_token)
        return self._step_done(eng, now)

    def _step_done(self, eng: _Engine, now: float) -> list:
        step = eng.step
        step.end_s = now
        if step.dispatch_end_s is None:
            step.dispatch_end_s = now
        eng.busy_s += now - step.start_s
        eng.phase = "idle"
        out = []
        if eng.kind == "prefill":
            for u, took in enumerate(eng.taken):
                for req in list(eng.queue[u]):
                    n = took.get(req.id)
                    if n is None:
                        continue
                    req.prefill_compute_s += step.compute_end_s - step.start_s
                    req.prefill_exchange_s += now - step.compute_end_s
                    req.attributed_to_s = now
                    req.prefilled_tokens += n
                    if req.prefilled_tokens >= req.input_tokens:
                        req.prefill_end_s = now
                        eng.queue[u].remove(req)
                        if not self.stopped:
                            out += self._send_kv(req, now)
        else:
            for u in range(len(eng.units)):
                keep = []
                for req in eng.batch[u]:
                    req.tokens_out += 1
                    if req.first_token_s is None:
                        req.first_token_s = now
                        req.decode_compute_s = step.compute_end_s - step.start_s
                        req.decode_exchange_s = now - step.compute_end_s
                    if req.tokens_out >= req.output_tokens:
                        out += self._finish(req, now)
                    else:
                        keep.append(req)
                eng.batch[u] = keep
        if any(eng.batch) and eng.kind == "decode" and not self.stopped:
            return out + self._continue_decode(eng, now)
        return out + self._maybe_step(eng, now)

    def _continue_decode(self, eng: _Engine, now: float) -> list:
        eng.steps += 1
        return self._start_decode(eng, now)

    # -- messages ---------------------------------------------------------------------------
    def _messages(self, kind: str, src: int, dst: int, real: int, request_id: int | None, engine: str,
                  step: int | None, owner: tuple, now: float) -> list:
        """``real`` bytes from src to dst as emulated messages, cut into ``chunk_bytes`` slices."""
        emulated = max(1, round(real / self.spec.bytes_scale))
        size = self.spec.chunk_bytes or emulated
        out = []
        for k, offset in enumerate(range(0, emulated, size)):
            m = Message(self._next_id, kind, src, dst, min(size, emulated - offset), real, request_id, engine,
                        step, k)
            self._next_id += 1
            self.messages[m.id] = m
            self.sent_at[m.id] = now
            self._owner[m.id] = owner
            out.append(Send(m))
        return out

    # -- results ----------------------------------------------------------------------------
    def request_rows(self) -> list[dict]:
        return [r.row() for r in sorted(self.requests.values(), key=lambda r: (r.arrival_s, r.id))]

    def step_rows(self) -> list[dict]:
        return [s.row() for s in self.steps]

    def results(self, end_s: float | None = None) -> dict:
        """Headline figures over the measured window [warmup, end] (real-cluster seconds)."""
        end = self.spec.duration_s if end_s is None else end_s
        lo = self.spec.warmup_s
        measured = [r for r in self.requests.values() if lo <= r.arrival_s < end]
        ttft = sorted(r.ttft_s for r in measured if r.first_token_s is not None and r.first_token_s <= end)
        tokens = 0
        for s in self.steps:
            if s.engine.startswith("decode") and s.end_s is not None and lo <= s.end_s <= end:
                tokens += s.requests
        exchanges = [s.end_s - s.compute_end_s for s in self.steps
                     if s.end_s is not None and s.compute_end_s is not None and s.messages]
        decode_steps = [s for s in self.steps if s.engine.startswith("decode") and s.end_s is not None]
        return {
            "measured_requests": len(measured),
            "first_token_missing": sum(1 for r in measured if r.first_token_s is None or r.first_token_s > end),
            "completed_requests": sum(1 for r in measured if r.done_s is not None and r.done_s <= end),
            "ttft_s": ttft,
            "throughput_tokens_per_s": tokens / (end - lo) if end > lo else 0.0,
            "exchange_s": exchanges,
            "decode_step_s": [s.end_s - s.start_s for s in decode_steps],
            "ep_bytes": sum(s.ep_bytes for s in self.steps),
            "nvlink_bytes": sum(s.nvlink_bytes for s in self.steps),
            "kv_bytes": sum(r.kv_bytes for r in self.requests.values() if r.prefill_end_s is not None),
            "utilization": {e.name: round(e.busy_s / end, 4) for kind in ("prefill", "decode")
                            for e in self.engines[kind]},
            # prefill compute the requests needed / what the units could do in the run: under 1 keeps up
            "prefill_token_utilization": {e.name: round(e.work_s / (end * len(e.units)), 4)
                                          for e in self.engines["prefill"]},
        }


def run_ideal(cluster: Cluster, port_bps: float, ports: int = 2, latency_s: float = 0.0,
              until_s: float | None = None) -> Cluster:
    """Run ``cluster`` against an ideal fabric: each GPU sends its messages one after the other at
    ``ports`` x ``port_bps`` (its NIC is the only bottleneck: a non-blocking fabric, receivers never
    congested), each arriving ``latency_s`` after its last byte left (a reference, and the unit tests'
    network)."""
    real_positive("port_bps", port_bps)
    heap: list = []
    serial = 0
    nic_free: dict[int, float] = {}

    def push(actions: list, now: float) -> None:
        nonlocal serial
        for a in actions:
            serial += 1
            if isinstance(a, Timer):
                heapq.heappush(heap, (a.at, serial, "timer", a.key))
            else:
                m = a.message
                share = m.bytes / max(1, math.ceil(m.real_bytes / cluster.spec.bytes_scale))
                wire = m.real_bytes * share * 8 / (port_bps * ports)
                done = max(now, nic_free.get(m.src_gpu, 0.0)) + wire
                nic_free[m.src_gpu] = done
                heapq.heappush(heap, (done + latency_s, serial, "deliver", m.id))

    push(cluster.start(0.0), 0.0)
    horizon = until_s if until_s is not None else cluster.spec.duration_s * 10
    while heap:
        at, _, what, key = heapq.heappop(heap)
        if at > horizon:
            break
        push(cluster.timer(key, at) if what == "timer" else cluster.delivered(key, at), at)
    return cluster


__all__ = ["ServingSpec", "Cluster", "Message", "Send", "Timer", "build_engines", "run_ideal", "ARRIVALS", "KINDS",
           "TTFT_PARTS", "STEP_PARTS", "layout_summary"]
