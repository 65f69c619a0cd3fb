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
TTFT = first token - arrival = wait for decode memory (``decode_memory`` only)
+ prefill queue + prefill + KV transfer + wait for a step + the first step.
Each request records these parts as they happen (``RequestState``: the wait
for decode memory, the prefill queue, the compute and the EP exchange of the
prefill steps it was in, the KV transfer, the wait for a decode step and that
step's compute and exchange), so they add up to its TTFT exactly;
``traffic.model.breakdown`` summarizes them for a run.

Prefix caching, KV memory and sessions (all off by default; docs/serving.md,
"Prefix caching, KV memory and sessions" and "Workloads"):

* ``prefix_cache``: each prefill unit keeps a ``PrefixCache`` of 512-token
  blocks (its KV pool, ``traffic.model.memory``). A request's hit, the
  longest cached prefix of its ``hash_ids`` (capped to leave one token), is
  taken when it enters its first prefill step (its blocks pinned until its
  prefill ends, when all its blocks go in); prefill computes only the rest,
  at the same tokens/s (the cached prefix's attention is not charged: GLM-5's
  sparse attention reads 2,048 selected tokens a query, ``index_topk``).
  A request without ``hash_ids`` takes ``prefix_hit`` of its input instead
  (whole blocks; also without ``prefix_cache``).
* Routing to a prefill unit (``prefill_routing``): ``kv`` (default) picks
  the unit with the fewest tokens to prefill there, the request's uncached
  tokens plus those queued (NVIDIA Dynamo's KV router's prefill cost: "Active
  prompt work already assigned to the worker plus the incoming request's
  uncached prompt work"; its decode term is left out, a prefill unit holding
  no decode sequences). Without a cache every unit's uncached tokens are the
  request's input, so ``kv`` picks what ``least-loaded`` (queued tokens) does.
* KV transfer: the whole input's KV (cached tokens too: the decode side has
  none of it; SGLang's prefill sends from ``decode_prefix_len``, 0 unless the
  decode side runs its own radix cache). ``decode_prefix_cache``: each decode
  unit caches finished requests' blocks, and only the tokens past its hit
  move (SGLang's ``--disaggregation-decode-enable-radix-cache``: "if decode
  has a cached prefix, we need to send the delta indices; otherwise, send the
  entire request").
* ``decode_memory``: each decode unit (a GPU of an EP group, or a TP
  instance) holds its requests' KV, input + output tokens, in a ``KVPool``
  of the GPU's memory. As SGLang's decode pre-allocates a request's KV
  before its prefill may run (``disaggregation/decode.py``: "pre-allocate kv
  once there is available kv"; ``prefill.py``'s bootstrap queue holds a
  request until "handshake and preallocation" finish), the decode unit is
  chosen at arrival (fewest tokens allocated and waiting there; with
  ``decode_prefix_cache`` plus the request's tokens not cached there) and
  the request waits, first come first served, until its KV fits: the TTFT
  part ``decode_memory``. Memory returns when its last token is out. Without
  ``decode_memory`` the decode unit is chosen when the prefill ends, fewest
  requests, as before.
* Sessions: a closed loop's ``concurrency`` slots each run one session at a
  time (``Request.session``, its turns in order): a turn arrives when the
  session's previous turn has its last token, after ``think_s``; a finished
  session makes way for the next of the workload. Requests without a session
  are sessions of one turn (the trace in order, as before). Trace-timed
  arrivals ignore sessions.

The core is clock-free and network-free: ``start``, ``timer`` and
``delivered`` take the current time in real-cluster seconds and return
actions (``Send`` a message, set a ``Timer``). ``traffic.runtime.coordinator`` runs it
against the emulated fabric; ``run_ideal`` against an ideal network (for
tests, and as the reference an exchange is compared with).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from traffic.model.errors import TrafficError
from traffic.model.expert import HitTable
from traffic.model.memory import KVPool, get_gpu
from traffic.model.models import kv_bytes_per_token_per_rank
from traffic.model.placement import Instance, gpu_server
from traffic.model.prefix_cache import BLOCK_TOKENS, PrefixCache, assumed_cached_tokens, cached_tokens, hit_ratios
from traffic.model.rankmap import kv_transfers
from traffic.model.serving_batch import PairTable, exchange
from traffic.model.serving_events import (
    KINDS,
    STEP_PARTS,
    TTFT_PARTS,
    Exchange,
    Message,
    RequestState,
    Send,
    StepRecord,
    Timer,
)
from traffic.model.serving_ideal import run_ideal
from traffic.model.serving_spec import (
    ARRIVALS,
    ROUTINGS,
    ServingSpec,
    build_engines,
    check_fits,
    layout_summary,
    unit_kv_tokens,
)
from traffic.model.traces import Request
from traffic.model.unit_routing import LeastLoaded, PrefillRouting


@dataclass
class _Engine:
    kind: str
    index: int
    units: tuple[Instance, ...]
    hits: HitTable | None
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


def _sessions(requests: Sequence[Request]) -> list[tuple[Request, ...]]:
    """The workload as sessions in order of their first request: a session's turns sorted by turn; a request
    without a session is a session of its own."""
    out: list[list[Request]] = []
    index: dict[int, int] = {}
    for r in requests:
        if r.session is None:
            out.append([r])
        elif r.session in index:
            out[index[r.session]].append(r)
        else:
            index[r.session] = len(out)
            out.append([r])
    return [tuple(sorted(turns, key=lambda r: r.turn)) for turns in out]


class Cluster:
    """The event machine (see module docstring)."""

    def __init__(self, spec: ServingSpec, requests: Sequence[Request], batched: bool = False) -> None:
        """``batched``: each expert-parallel phase is one ``Exchange`` action and its end one
        ``exchange_delivered`` call (``traffic.model.serving_batch``); KV transfers stay messages."""
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
        self.batched = batched
        self._batched_in_flight = 0  # messages of batched phases not yet arrived
        self._serial = 0  # closed loop: request ids of later rounds of the trace
        seed = spec.seed
        self.engines: dict[str, list[_Engine]] = {}
        for kind, groups in (("prefill", spec.prefill), ("decode", spec.decode)):
            engines = []
            for i, units in enumerate(groups):
                gpus = tuple(g for u in units for g in u.gpus)
                # an EP group of several units exchanges tokens; one TP instance (dense, or an MoE model's
                # experts sharded inside it) has no all-to-all
                hits = HitTable(gpus, spec, seed + 7919 * (len(engines) + 1) + (kind == "decode"),
                                 per_expert=kind == "decode") if spec.expert_parallel and len(units) > 1 else None
                engines.append(_Engine(kind, i, units, hits, [[] for _ in units], batch=[[] for _ in units]))
            self.engines[kind] = engines
        self._by_name = {e.name: e for es in self.engines.values() for e in es}
        self._pairs = {e.name: PairTable(e.hits) for e in self._by_name.values() if batched and e.hits is not None}
        self.stopped = False
        # closed loop: the workload as sessions, each a tuple of turns in order (a request without a session
        # is a session of one turn), drawn in order of their first request
        self._sessions = _sessions(self.source)
        self._next_turns: dict[int, tuple[Request, ...]] = {}  # request id -> its session's later turns
        self._waiting_turn: dict[int, tuple[Request, tuple[Request, ...]]] = {}  # think_s timers
        # prefix caches (prefill units), KV pools (decode units) and the requests waiting for one
        self.caches: dict[tuple[int, int], PrefixCache] = {}
        self.host_caches: dict[tuple[int, int], PrefixCache] = {}  # HiCache's host tier behind each prefill cache
        self.pools: dict[tuple[int, int], KVPool] = {}
        self.decode_caches: dict[tuple[int, int], PrefixCache] = {}
        self._alloc_queue: dict[tuple[int, int], list[RequestState]] = {}
        self._routing = PrefillRouting([(e.index, u) for e in self.engines["prefill"] for u in range(len(e.units))],
                                       spec.prefill_routing == "kv")
        gpu_tier, host_tier = self._routing.tiers  # the caches tell the routing which blocks they hold
        if spec.prefix_cache:
            for eng in self.engines["prefill"]:
                for u, unit in enumerate(eng.units):
                    tokens = unit_kv_tokens(spec, "prefill", len(unit.gpus), len(eng.gpus))
                    key, at = (eng.index, u), self._routing.position[(eng.index, u)]
                    self.caches[key] = PrefixCache(tokens // BLOCK_TOKENS, gpu_tier, at)
                    if spec.hicache_ratio > 0:  # write-through host tier (SGLang HiCache)
                        self.host_caches[key] = PrefixCache(int(tokens * spec.hicache_ratio) // BLOCK_TOKENS,
                                                            host_tier, at)
        if spec.decode_memory or spec.decode_prefix_cache:
            for eng in self.engines["decode"]:
                for u, unit in enumerate(eng.units):
                    tokens = unit_kv_tokens(spec, "decode", len(unit.gpus), len(eng.gpus))
                    cache = PrefixCache(tokens // BLOCK_TOKENS) if spec.decode_prefix_cache else None
                    if cache is not None:
                        self.decode_caches[(eng.index, u)] = cache
                    if spec.decode_memory:
                        self.pools[(eng.index, u)] = KVPool(tokens, cache)
                        self._alloc_queue[(eng.index, u)] = []
        # each decode unit's committed and queued KV (decode memory; without a decode prefix cache a request needs
        # as much on every unit), for picking the least committed unit without a pass over all of them
        self._decode_loads = LeastLoaded(list(self.pools)) if self.pools and not spec.decode_prefix_cache else None

    # -- events -----------------------------------------------------------------------------
    def start(self, now: float = 0.0) -> list:
        """Admit the first requests: the whole trace's arrival timers, or ``concurrency`` at once."""
        out: list = [Timer(self.spec.duration_s, ("end",))]
        if self.spec.arrivals == "closed" and self.spec.warm_start:
            out += self._warm_start(now)
        elif self.spec.arrivals == "closed":
            for _ in range(self.spec.concurrency):
                out += self._start_session(now)
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
        if key[0] == "turn":  # a session's next turn, after think_s
            r, later = self._waiting_turn.pop(key[1])
            return [] if self.stopped else self._arrive(r, now, later)
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

    def exchange_delivered(self, engine: str, last_id: int, now: float) -> list:
        """Every message of ``engine``'s current phase (an ``Exchange``) has arrived, the last of them
        ``last_id`` at ``now`` (the batched path)."""
        eng = self._by_name[engine]
        self._batched_in_flight -= eng.pending
        eng.pending = 0
        if eng.phase == "dispatch":
            eng.step.dispatch_last_id = last_id
        else:
            eng.step.combine_last_id = last_id
        return self._phase_done(eng, now)

    @property
    def in_flight(self) -> int:
        """Messages sent and not yet delivered."""
        return len(self._owner) + self._batched_in_flight

    @property
    def message_count(self) -> int:
        """Messages sent so far (KV slices and EP messages)."""
        return self._next_id

    @property
    def quiet(self) -> bool:
        """Stopped, every step finished and nothing in flight: nothing more will happen."""
        return self.stopped and not self._owner and all(e.phase == "idle" for es in self.engines.values()
                                                         for e in es)

    # -- requests ---------------------------------------------------------------------------
    def _draw(self) -> tuple[Request, ...]:
        """The next session of the workload for the closed loop (the workload again from its start when used
        up: request ids, and session ids, + round x 10^9; hash ids unchanged, so a workload should be long
        enough not to come round again when caches matter)."""
        turns = self._sessions[self.next_source % len(self._sessions)]
        rounds = self.next_source // len(self._sessions)
        self.next_source += 1
        if rounds:
            turns = tuple(replace(r, request_id=r.request_id + rounds * 10 ** 9,
                                  session=None if r.session is None else r.session + rounds * 10 ** 9)
                          for r in turns)
        return turns

    def _warm_start(self, now: float) -> list:
        """Start the closed loop as if it had been serving for a while (``warm_start``): each slot's session
        joins at a turn drawn uniformly among its turns, the prefix its earlier turns left is in a prefill
        unit's cache (slots dealt round robin over the units; GPU tier and host tier, as write-through leaves
        it), and the first turns arrive uniformly spread over the time the prefill engines need to compute
        their uncached tokens at full rate, not all at once. Its own random stream (the expert routing's is
        untouched)."""
        rng = np.random.default_rng(self.spec.seed + 104_729)
        units = [(e.index, u) for e in self.engines["prefill"] for u in range(len(e.units))]
        rate = sum(self.spec.prefill_rate * len(e.units[u].gpus) for e in self.engines["prefill"]
                   for u in range(len(e.units)))
        firsts, work = [], 0
        for slot in range(self.spec.concurrency):
            turns = self._draw()
            k = int(rng.integers(0, len(turns)))
            before = turns[k - 1] if k else None
            key = units[slot % len(units)]
            if before is not None and before.hash_ids:
                for tier in (self.caches.get(key), self.host_caches.get(key)):
                    if tier is not None:
                        tier.insert(before.hash_ids)
            firsts.append((turns[k], turns[k + 1:]))
            work += turns[k].input_tokens - (before.input_tokens if before is not None else 0)
        spread = max(0, work) / rate
        out = []
        for slot, (first, later) in enumerate(firsts):
            at = now + float(rng.uniform(0.0, spread))
            self._waiting_turn[first.request_id] = (first, later)
            out.append(Timer(at, ("turn", first.request_id)))
        return out

    def _start_session(self, now: float) -> list:
        turns = self._draw()
        return self._arrive(turns[0], now, turns[1:])

    def _arrive(self, r: Request, now: float, later: tuple[Request, ...] = ()) -> list:
        if r.request_id in self.requests:
            raise TrafficError(f"request_id {r.request_id} arrived twice; expected unique request ids")
        req = RequestState(r.request_id, now, max(1, r.input_tokens), max(1, r.output_tokens), r.hash_ids,
                           r.session, r.turn)
        req.attributed_to_s = now
        self.requests[req.id] = req
        self._next_turns[req.id] = later
        if not req.hash_ids and self.spec.prefix_hit:
            req.cached_tokens = assumed_cached_tokens(self.spec.prefix_hit, req.input_tokens)
        if self.spec.decode_memory:  # SGLang: decode pre-allocates the KV before the prefill may run
            if self._decode_loads is not None:  # the same unit: req's need is the same on every unit
                e, unit = self._decode_loads.best()
                eng = self.engines["decode"][e]
            else:
                eng, unit = self._least_loaded("decode", lambda e, u: self._decode_commit_cost(req, e, u))
            req.decode_unit = (eng.index, unit)
            pool = self.pools[req.decode_unit]
            check_fits(req.id, req.input_tokens + req.output_tokens, pool.capacity)
            self._alloc_queue[req.decode_unit].append(req)
            return self._admit(req.decode_unit, now)
        return self._to_prefill(req, now)

    def _decode_hit(self, req: RequestState, key: tuple[int, int]) -> int:
        """Blocks of ``req``'s chain decode unit ``key`` has cached (decode_prefix_cache)."""
        cache = self.decode_caches.get(key)
        return cache.match(req.hash_ids) if cache is not None and req.hash_ids else 0

    def _decode_need(self, req: RequestState, key: tuple[int, int]) -> int:
        """Tokens of a decode unit's KV pool ``req`` would take there: input + output, less its cached prefix."""
        return req.input_tokens + req.output_tokens - cached_tokens(self._decode_hit(req, key), req.input_tokens)

    def _decode_commit_cost(self, req: RequestState, eng: _Engine, u: int) -> int:
        key = (eng.index, u)
        return self._decode_committed(key) + self._decode_need(req, key)

    def _decode_committed(self, key: tuple[int, int]) -> int:
        """A decode unit's KV allocated and asked for by the requests waiting there."""
        return self.pools[key].committed + sum(self._decode_need(x, key) for x in self._alloc_queue[key])

    def _admit(self, key: tuple[int, int], now: float) -> list:
        """Allocate decode KV to the requests waiting at decode unit ``key``, first come first served, as long
        as the next one fits; each then goes to its prefill."""
        out = []
        queue = self._alloc_queue[key]
        pool = self.pools[key]
        while queue and not self.stopped:
            req = queue[0]
            hit = self._decode_hit(req, key)
            need = req.input_tokens + req.output_tokens - cached_tokens(hit, req.input_tokens)
            if not pool.try_allocate(need):
                break
            queue.pop(0)
            req.kv_alloc_tokens = need
            self._take_decode_hit(req, key, hit)
            req.decode_memory_s = now - req.arrival_s
            req.attributed_to_s = now
            out += self._to_prefill(req, now)
        if self._decode_loads is not None:  # every change to a unit's pool or queue ends here
            self._decode_loads.set(key, self._decode_committed(key))
        return out

    def _take_decode_hit(self, req: RequestState, key: tuple[int, int], hit: int) -> None:
        if hit:
            self.decode_caches[key].acquire(req.hash_ids, hit)
            req.decode_pinned_blocks = hit
            req.decode_cached_tokens = cached_tokens(hit, req.input_tokens)

    def _prefill_left(self, x: RequestState) -> int:
        """Tokens still to prefill for a queued request (before its first step: as the router expected)."""
        cached = x.cached_tokens if x.prefill_start_s is not None else max(x.cached_tokens, x.cache_estimate)
        return x.input_tokens - cached - x.prefilled_tokens

    def _to_prefill(self, req: RequestState, now: float) -> list:
        e, unit = self._routing.pick(req.hash_ids, req.input_tokens, req.cached_tokens)
        eng = self.engines["prefill"][e]
        req.prefill_unit = (eng.index, unit)
        req.cache_estimate = self._prefill_hit_tokens(req, req.prefill_unit)
        eng.queue[unit].append(req)
        self._requeue(eng)
        return self._maybe_step(eng, now)

    def _requeue(self, eng: _Engine) -> None:
        """Tell the routing the tokens queued at each unit of prefill engine ``eng``, after every change."""
        for u, queue in enumerate(eng.queue):
            self._routing.set_queued((eng.index, u), sum(self._prefill_left(x) for x in queue))

    def _prefill_hit_tokens(self, req: RequestState, key: tuple[int, int]) -> int:
        cache = self.caches.get(key)
        if cache is None or not req.hash_ids:
            return 0
        host = self.host_caches.get(key)
        blocks = max(cache.match(req.hash_ids), host.match(req.hash_ids) if host is not None else 0)
        return cached_tokens(blocks, req.input_tokens)

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
        if req.decode_unit is None:  # no decode memory: chosen now, the unit with the fewest requests
            deng, du = self._least_loaded("decode", self._decode_load)
            req.decode_unit = (deng.index, du)
            if req.decode_unit in self.decode_caches:
                self._take_decode_hit(req, req.decode_unit, self._decode_hit(req, req.decode_unit))
        deng = self.engines["decode"][req.decode_unit[0]]
        dst = deng.units[req.decode_unit[1]]
        req.kv_tokens = req.input_tokens - req.decode_cached_tokens  # the whole context, or the delta
        out = []
        pairs = kv_transfers(req.kv_tokens, self.spec.model, self.spec.dtype,
                             Instance("prefill", 0, src.gpus), Instance("decode", 0, dst.gpus), req.id,
                             self.spec.mla_sender)
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
        out = []
        key = req.decode_unit
        cache = self.decode_caches.get(key)
        if cache is not None and req.decode_pinned_blocks:
            cache.release(req.hash_ids, req.decode_pinned_blocks)
            req.decode_pinned_blocks = 0
        if key in self.pools:
            pool = self.pools[key]
            pool.free(req.kv_alloc_tokens)
            if req.hash_ids:
                pool.insert(req.hash_ids)  # its KV stays as cached blocks (decode_prefix_cache)
            out += self._admit(key, now)
        elif cache is not None and req.hash_ids:
            cache.insert(req.hash_ids)
        later = self._next_turns.pop(req.id, ())
        if self.spec.arrivals == "closed" and not self.stopped:
            if not later:
                return out + self._start_session(now)
            if self.spec.think_s > 0:
                self._waiting_turn[later[0].request_id] = (later[0], later[1:])
                return out + [Timer(now + self.spec.think_s, ("turn", later[0].request_id))]
            return out + self._arrive(later[0], now, later[1:])
        return out

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
            load_s = 0.0  # host-tier hits loaded into the GPU before this step computes
            for req in eng.queue[u]:
                if budget == 0:
                    break
                if req.prefill_start_s is None:
                    req.prefill_start_s = now
                    load_s += self._take_prefill_hit(req, (eng.index, u))
                n = min(budget, req.input_tokens - req.cached_tokens - req.prefilled_tokens)
                req.prefill_queue_s += now - req.attributed_to_s  # waited since arrival or its last step
                took[req.id] = n
                budget -= n
            eng.taken.append(took)
            tokens.append(sum(took.values()))
            need = tokens[-1] / (self.spec.prefill_rate * len(unit.gpus)) + load_s
            eng.work_s += need
            compute = max(compute, need)
        self._requeue(eng)
        return self._begin(eng, now, compute, tokens, sum(len(t) for t in eng.taken))

    def _take_prefill_hit(self, req: RequestState, key: tuple[int, int]) -> float:
        """The request's hit on its prefill unit's cache, taken (and pinned) as its first step starts; the
        seconds it takes to load the part of the hit only the host tier holds (HiCache) into the GPU."""
        cache = self.caches.get(key)
        if cache is None or not req.hash_ids:
            return 0.0
        blocks = cache.match(req.hash_ids)
        if blocks:
            cache.acquire(req.hash_ids, blocks)
            req.pinned_blocks = blocks
        req.cached_tokens = cached_tokens(blocks, req.input_tokens)
        host = self.host_caches.get(key)
        if host is None:
            return 0.0
        on_host = host.match(req.hash_ids)
        if on_host > blocks:
            total = cached_tokens(on_host, req.input_tokens)
            req.host_tokens = total - req.cached_tokens
            req.cached_tokens = total
        unit = self.engines["prefill"][key[0]].units[key[1]]
        per_rank = kv_bytes_per_token_per_rank(self.spec.model, self.spec.dtype, len(unit.gpus))
        return req.host_tokens * per_rank / get_gpu(self.spec.gpu).host_link_bytes_per_s

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
        if self.batched:
            eng.step_pairs = self._pairs[eng.name].draw(per_gpu, self.rng)
        else:
            eng.step_pairs = eng.hits.tokens(per_gpu, self.rng)
        return self._exchange(eng, now, "dispatch", eng.hits.dispatch_per_token)

    def _exchange(self, eng: _Engine, now: float, kind: str, per_token: int) -> list:
        if self.batched:
            ex, ep, nvlink = exchange(eng.step_pairs, kind, per_token, self.spec.gpus_per_server,
                                      self.spec.bytes_scale, self.spec.chunk_bytes, eng.name, eng.step.step,
                                      self._next_id)
            eng.step.nvlink_bytes += nvlink
            eng.step.ep_bytes += ep
            self._next_id += len(ex)
            self._batched_in_flight += len(ex)
            eng.pending = len(ex)
            eng.step.messages += eng.pending
            return [ex] if eng.pending else self._phase_done(eng, now)
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
                    if req.prefilled_tokens >= req.input_tokens - req.cached_tokens:
                        req.prefill_end_s = now
                        eng.queue[u].remove(req)
                        cache = self.caches.get((eng.index, u))
                        if cache is not None and req.hash_ids:  # its blocks' KV exists now
                            cache.insert(req.hash_ids)
                            if (eng.index, u) in self.host_caches:  # written through to the host tier
                                self.host_caches[(eng.index, u)].insert(req.hash_ids)
                            cache.release(req.hash_ids, req.pinned_blocks)
                            req.pinned_blocks = 0
                        if not self.stopped:
                            out += self._send_kv(req, now)
            self._requeue(eng)
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
        prefilled = [r for r in measured if r.prefill_end_s is not None and r.prefill_end_s <= end]
        inputs, cached = sum(r.input_tokens for r in prefilled), sum(r.cached_tokens for r in prefilled)
        host = sum(r.host_tokens for r in prefilled)
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
            # the measured requests prefilled by the end: their prompt tokens, those their prefill unit had cached
            # (of them, from its host tier), the hit ratios, and the tokens whose KV moved to decode (the whole
            # context, or the decode side's delta)
            "prefix": {"requests": len(prefilled), "with_hash_ids": sum(1 for r in prefilled if r.hash_ids),
                       "input_tokens": inputs, "cached_tokens": cached, "host_tokens": host,
                       **hit_ratios(inputs, cached, host),
                       "kv_tokens": sum(r.kv_tokens for r in prefilled if r.kv_end_s is not None)},
            "kv_memory": self.kv_memory(),
        }

    def kv_memory(self) -> dict:
        """The prefix caches' and KV pools' sizes and the most they held (None where not modelled)."""
        caches = list(self.caches.values())
        pools = list(self.pools.values())
        dcaches = list(self.decode_caches.values())
        return {"prefill_cache_blocks": max((c.capacity for c in caches), default=None),
                "prefill_cache_peak_blocks": max((c.peak for c in caches), default=None),
                "prefill_cache_evictions": sum(c.evictions for c in caches) if caches else None,
                "decode_pool_tokens": max((p.capacity for p in pools), default=None),
                "decode_pool_peak_tokens": max((p.peak for p in pools), default=None),
                "decode_cache_evictions": sum(c.evictions for c in dcaches) if dcaches else None,
                "waiting_for_decode_memory": sum(len(q) for q in self._alloc_queue.values()) if pools else None}


__all__ = ["ServingSpec", "Cluster", "Message", "Send", "Exchange", "Timer", "build_engines", "run_ideal", "ARRIVALS",
           "KINDS", "ROUTINGS", "TTFT_PARTS", "STEP_PARTS", "layout_summary"]
