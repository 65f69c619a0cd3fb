"""Build the timed list of KV transfers that the emulator will replay.

Per request, in arrival order (ties by request_id):
1. ``Scheduler.assign`` picks a prefill and a decode instance at arrival.
2. Prefill is FIFO per prefill instance: start = max(arrival, end of the
   instance's previous prefill); compute = input_tokens /
   (prefill_tokens_per_s_per_gpu x TP) (the model's rough figure unless
   overridden; linear in TP, no batching effects).
3. KV transfers from ``rankmap.kv_transfers``, timed by ``mode``:
   ``"whole"``: every pair's bytes at prefill end (vLLM NIXL style), chunk 0;
   ``"layerwise"``: each pair's bytes split evenly over the layers, chunk i
   (0-based layer) at start + compute x (i + 1) / layers (Mooncake / SGLang
   layer pipeline), so the last chunk goes at prefill end.
4. Bytes are scaled for emulation: emulated = max(1, round(real / bytes_scale))
   per (pair, chunk); times stay real. A (pair, chunk) whose emulated size is
   below ``min_packets`` x ``mtu_bytes`` counts as one fidelity warning (too
   few packets for congestion control to matter).
5. Each (pair, chunk) is cut into slices of at most ``chunk_bytes`` emulated
   bytes (default 64 KiB like Mooncake's Transfer Engine), all released at the
   chunk's time; ``chunk_bytes=None`` keeps one transfer per (pair, chunk).
   Slicing applies in both modes and to emulated (post-scale) bytes, since
   those are what go on the wire.

For least_loaded scheduling, a request holds its decode instance until
prefill end + output_tokens x ``decode_s_per_token`` (a rough decode model,
used for load balancing and recorded as ``RequestTiming.decode_end_s``).

Operating point (``operating_point``, ``overloaded``): per prefill and decode
instance, utilization (busy time / window) and queue length sampled over the
replayed window, as plain rows for ``instances.csv`` and ``queue.csv``, and a
one-line overload flag. See ``operating_point``'s docstring for the recipe.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from typing import Mapping, Sequence

from traffic.model._check import int_at_least, one_of, real_at_least, real_positive
from traffic.model.errors import TrafficError
from traffic.model.models import ModelSpec, dtype_bytes
from traffic.model.placement import Placement, Scheduler
from traffic.model.rankmap import kv_transfers
from traffic.model.traces import Request

MODES = ("whole", "layerwise")


@dataclass(frozen=True, slots=True)
class ScheduledTransfer:
    """One flow to emulate: emulated ``bytes`` from src to dst at ``scheduled_start_s``."""

    request_id: int
    chunk: int
    src_gpu: int
    dst_gpu: int
    bytes: int
    scheduled_start_s: float
    slice_index: int = 0


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """Where and when one request was prefilled, and how many KV bytes it moves."""

    request_id: int
    arrival_s: float
    prefill_instance: int
    decode_instance: int
    prefill_start_s: float
    prefill_end_s: float
    kv_bytes: int
    emulated_bytes: int
    decode_end_s: float | None = None  # prefill end + output_tokens x decode_s_per_token; None: not modelled

    @property
    def queueing_s(self) -> float:
        """Time waiting for the prefill instance."""
        return self.prefill_start_s - self.arrival_s


@dataclass
class Schedule:
    """All transfers (sorted by start time) and per-request timings (arrival order)."""

    transfers: list[ScheduledTransfer]
    requests: list[RequestTiming]
    mode: str
    bytes_scale: float
    chunk_bytes: int | None
    fidelity_warnings: int
    fidelity_threshold_bytes: int
    checked_chunks: int
    n_prefill: int = 0  # instances of the placement (0: unknown; idle instances then go unseen)
    n_decode: int = 0

    def timing(self, request_id: int) -> RequestTiming:
        """The timing of one request."""
        for t in self.requests:
            if t.request_id == request_id:
                return t
        raise TrafficError(f"request_id {request_id!r} is not in the schedule; expected one of its requests")


def build_schedule(requests: Sequence[Request], placement: Placement, scheduler: Scheduler,
                   model: ModelSpec, dtype: str = "bf16", mode: str = "whole",
                   chunk_bytes: int | None = 65_536, bytes_scale: float = 1.0,
                   mtu_bytes: int = 1500, min_packets: int = 3, mla_sender: str = "rank0",
                   decode_s_per_token: float = 0.03,
                   prefill_tokens_per_s_per_gpu: float | None = None) -> Schedule:
    """Schedule prefill and KV transfers for ``requests`` (see module docstring)."""
    one_of("transfer mode", mode, MODES)
    dtype_bytes(dtype)
    if chunk_bytes is not None:
        int_at_least("chunk_bytes", chunk_bytes, 1)
    scale = real_positive("bytes_scale", bytes_scale)
    int_at_least("mtu_bytes", mtu_bytes, 1)
    int_at_least("min_packets", min_packets, 0)
    real_at_least("decode_s_per_token", decode_s_per_token, 0.0)
    rate = model.prefill_tokens_per_s_per_gpu if prefill_tokens_per_s_per_gpu is None else \
        real_positive("prefill_tokens_per_s_per_gpu", prefill_tokens_per_s_per_gpu)
    threshold = min_packets * mtu_bytes
    n_chunks = model.layers if mode == "layerwise" else 1
    free_at = [0.0] * len(placement.prefill)
    out: list[ScheduledTransfer] = []
    timings: list[RequestTiming] = []
    warnings = checked = 0
    seen: set[int] = set()
    for req in sorted(requests, key=lambda r: (r.arrival_s, r.request_id)):
        if req.request_id in seen:
            raise TrafficError(f"request_id {req.request_id} appears twice; expected unique request ids")
        seen.add(req.request_id)
        pick = scheduler.assign(req, placement, req.arrival_s)
        start = max(req.arrival_s, free_at[pick.prefill.index])
        compute = req.input_tokens / (rate * pick.prefill.tp)
        end = start + compute
        free_at[pick.prefill.index] = end
        decode_end = end + req.output_tokens * decode_s_per_token
        scheduler.release(req.request_id, prefill_done_s=end, decode_done_s=decode_end)
        real_total = emu_total = 0
        for tr in kv_transfers(req.input_tokens, model, dtype, pick.prefill, pick.decode,
                               req.request_id, mla_sender):
            real_total += tr.bytes
            base, extra = divmod(tr.bytes, n_chunks)
            for chunk in range(n_chunks):
                real = base + (extra if chunk == n_chunks - 1 else 0)
                if real == 0:
                    continue
                emulated = max(1, round(real / scale))
                emu_total += emulated
                checked += 1
                warnings += emulated < threshold
                at = end if mode == "whole" else start + compute * (chunk + 1) / n_chunks
                step = chunk_bytes or emulated
                for k, offset in enumerate(range(0, emulated, step)):
                    out.append(ScheduledTransfer(req.request_id, chunk, tr.src_gpu, tr.dst_gpu,
                                                 min(step, emulated - offset), at, k))
        timings.append(RequestTiming(req.request_id, req.arrival_s, pick.prefill.index,
                                     pick.decode.index, start, end, real_total, emu_total, decode_end))
    out.sort(key=lambda t: (t.scheduled_start_s, t.request_id, t.chunk, t.dst_gpu, t.src_gpu,
                            t.slice_index))
    return Schedule(out, timings, mode, scale, chunk_bytes, warnings, threshold, checked,
                    len(placement.prefill), len(placement.decode))


def ttft_proxy(timing: RequestTiming, transfer_end_s: float | None = None) -> float:
    """Queueing + prefill compute + KV transfer tail past prefill end (if any).

    ``transfer_end_s`` is the measured completion of the request's last
    transfer in trace time; None means no transfer term.
    """
    tail = 0.0 if transfer_end_s is None else max(0.0, transfer_end_s - timing.prefill_end_s)
    return timing.queueing_s + (timing.prefill_end_s - timing.prefill_start_s) + tail


def ttft_proxies(schedule: Schedule, transfer_end_s: Mapping[int, float],
                 allow_missing: bool = False) -> dict[int, float]:
    """TTFT proxy per request id from measured last-transfer end times."""
    result: dict[int, float] = {}
    for t in schedule.requests:
        end = transfer_end_s.get(t.request_id)
        if end is None and not allow_missing and t.kv_bytes > 0:
            raise TrafficError(f"no measured transfer end for request_id {t.request_id}; expected one "
                               "per scheduled request (or allow_missing=True)")
        result[t.request_id] = ttft_proxy(t, end)
    return result


# --- Operating point: utilization and queues per instance ------------------------------------

OVERLOAD_MESSAGE = "the cluster is overloaded; TTFT measures the queue"
INSTANCE_KINDS = ("prefill", "decode")
MIN_QUEUE_GROWTH = 5.0       # requests; see overloaded()
MAX_UTILIZATION = 0.95       # see overloaded()


@dataclass(frozen=True, slots=True)
class InstanceLoad:
    """One instance over the window.

    ``utilization``: busy time in the window / window length (prefill: some
    request in prefill; decode: some request decoding). ``offered_load``:
    service seconds asked for by the requests ARRIVING in the window / window
    length; for prefill this is rho (> 1: the instance cannot keep up whatever
    the scheduling), for decode the mean number of requests decoding at once.
    ``mean_queue`` / ``max_queue``: over the queue samples.
    """

    kind: str
    instance: int
    requests: int
    busy_s: float
    window_s: float
    utilization: float
    offered_load: float
    mean_queue: float
    max_queue: int


@dataclass(frozen=True, slots=True)
class QueueSample:
    """Requests queued at one instance at time ``t_s`` (prefill: waiting or in
    prefill; decode: decoding, i.e. between prefill end and decode end)."""

    t_s: float
    kind: str
    instance: int
    queue: int


@dataclass(frozen=True)
class OperatingPoint:
    """Utilization and queue series of every instance over ``[start_s, end_s]``."""

    start_s: float
    end_s: float
    sample_s: float
    instances: tuple[InstanceLoad, ...]
    queue: tuple[QueueSample, ...]

    def instance_rows(self) -> list[dict]:
        """``instances.csv`` rows: instance, kind, utilization, busy_s, window_s, offered_load,
        requests, mean_queue, max_queue (prefill instances first, then decode, by index)."""
        return [{"instance": i.instance, "kind": i.kind, "utilization": round(i.utilization, 4),
                 "busy_s": round(i.busy_s, 6), "window_s": round(i.window_s, 6),
                 "offered_load": round(i.offered_load, 4), "requests": i.requests,
                 "mean_queue": round(i.mean_queue, 4), "max_queue": i.max_queue} for i in self.instances]

    def queue_rows(self) -> list[dict]:
        """``queue.csv`` rows: t_s, kind, instance, queue (time-major, prefill before decode)."""
        return [{"t_s": round(q.t_s, 6), "kind": q.kind, "instance": q.instance, "queue": q.queue}
                for q in self.queue]

    def utilization(self, kind: str = "prefill") -> dict[int, float]:
        """Utilization per instance index of one kind (for a summary's per-instance list)."""
        _check_kind(kind)
        return {i.instance: i.utilization for i in self.instances if i.kind == kind}

    def series(self, kind: str, instance: int) -> list[tuple[float, int]]:
        """(t_s, queue) samples of one instance."""
        _check_kind(kind)
        return [(q.t_s, q.queue) for q in self.queue if q.kind == kind and q.instance == instance]


def _check_kind(kind: str) -> None:
    one_of("instance kind", kind, INSTANCE_KINDS)


def _union_in(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of [a, b) intervals, clipped to [lo, hi)."""
    busy, cur_a, cur_b = 0.0, None, None
    for a, b in sorted((max(a, lo), min(b, hi)) for a, b in intervals):
        if b <= a:
            continue
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                busy += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        busy += cur_b - cur_a
    return busy


def _count_at(sorted_times: list[float], t: float) -> int:
    return bisect_right(sorted_times, t)


def operating_point(schedule: Schedule | Sequence[RequestTiming],
                    window_s: float | tuple[float, float] | None = None, sample_s: float = 1.0,
                    n_prefill: int | None = None, n_decode: int | None = None) -> OperatingPoint:
    """Per-instance utilization and queue series from a schedule (no network involved).

    ``window_s``: the replayed window, as its end (start 0, the trace slice's
    origin) or ``(start, end)`` in schedule seconds; None: from 0 to the last
    prefill end (the whole run). The replay should pass ``duration_s / speed``.
    Busy time and queues count only inside the window; queues are sampled at
    start, start + sample_s, ... <= end. Decode uses ``decode_end_s`` (the
    schedule's rough ``decode_s_per_token`` model; decode is assumed to start
    at prefill end, before the KV transfer, which the schedule does not time).
    ``n_prefill`` / ``n_decode`` default to the schedule's placement counts
    (else the highest instance index seen + 1) so idle instances show up.

    Recipe for the replay (writes nothing itself)::

        op = operating_point(prepared.schedule, cfg.duration_s / cfg.speed)
        write_csv(run_dir / "instances.csv", op.instance_rows())
        write_csv(run_dir / "queue.csv", op.queue_rows())
        summary["prefill_utilization"] = op.utilization("prefill")
        summary["decode_utilization"] = op.utilization("decode")
        flag = overloaded(op)            # None, or the one-line message for the report
    """
    timings = list(schedule.requests if isinstance(schedule, Schedule) else schedule)
    if not timings:
        raise TrafficError("the schedule has no request; expected at least one to measure an operating point")
    if isinstance(schedule, Schedule):
        n_prefill = n_prefill if n_prefill is not None else (schedule.n_prefill or None)
        n_decode = n_decode if n_decode is not None else (schedule.n_decode or None)
    step = real_positive("sample_s", sample_s)
    if window_s is None:
        start, end = 0.0, max(t.prefill_end_s for t in timings)
    elif isinstance(window_s, tuple):
        if len(window_s) != 2:
            raise TrafficError(f"window {window_s!r} is not allowed; expected (start_s, end_s) or an end in seconds")
        start = real_at_least("window start_s", window_s[0], 0.0)
        end = real_positive("window end_s", window_s[1])
    else:
        start, end = 0.0, real_positive("window_s", window_s)
    if end <= start:
        raise TrafficError(f"window end {end:g} s is not after its start {start:g} s; expected end > start")
    length = end - start
    counts = {"prefill": n_prefill, "decode": n_decode}
    for kind, attr in (("prefill", "prefill_instance"), ("decode", "decode_instance")):
        seen = max(getattr(t, attr) for t in timings) + 1
        if counts[kind] is None:
            counts[kind] = seen
        elif int_at_least(f"n_{kind}", counts[kind], 1) < seen:
            raise TrafficError(f"n_{kind} {counts[kind]} is fewer than the {kind} instances the schedule uses "
                               f"({seen}); expected at least {seen}")
    n_samples = int(math.floor(length / step + 1e-9)) + 1
    times = [start + k * step for k in range(n_samples)]
    loads: list[InstanceLoad] = []
    samples: dict[tuple[str, int], list[int]] = {}
    for kind in INSTANCE_KINDS:
        for idx in range(counts[kind]):
            if kind == "prefill":
                mine = [t for t in timings if t.prefill_instance == idx]
                spans = [(t.prefill_start_s, t.prefill_end_s) for t in mine]
                enter = sorted(t.arrival_s for t in mine)
                leave = sorted(t.prefill_end_s for t in mine)
            else:
                mine = [t for t in timings if t.decode_instance == idx and t.decode_end_s is not None]
                spans = [(t.prefill_end_s, t.decode_end_s) for t in mine]
                enter = sorted(t.prefill_end_s for t in mine)
                leave = sorted(t.decode_end_s for t in mine)
            arriving = [t for t in mine if start <= t.arrival_s < end]
            work = sum(b - a for (a, b), t in zip(spans, mine) if start <= t.arrival_s < end)
            busy = _union_in(spans, start, end)
            series = [_count_at(enter, x) - _count_at(leave, x) for x in times]
            samples[(kind, idx)] = series
            loads.append(InstanceLoad(kind, idx, len(arriving), busy, length, busy / length, work / length,
                                      sum(series) / len(series), max(series)))
    queue = tuple(QueueSample(x, kind, idx, samples[(kind, idx)][k])
                  for k, x in enumerate(times) for kind in INSTANCE_KINDS for idx in range(counts[kind]))
    return OperatingPoint(start, end, step, tuple(loads), queue)


def _slope(points: list[tuple[float, int]]) -> float:
    """Least-squares slope of queue vs time (requests per second)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return 0.0 if sxx == 0 else sum((x - mx) * (y - my) for x, y in points) / sxx


def overloaded(point: OperatingPoint, min_growth: float = MIN_QUEUE_GROWTH,
               max_utilization: float = MAX_UTILIZATION) -> str | None:
    """One-line overload message if a prefill queue keeps growing, else None.

    A prefill instance is flagged when either
    * its queue grows through the window: the least-squares trend of its queue
      samples is positive AND the mean of the last third of the samples exceeds
      the mean of the first third by more than ``min_growth`` requests (needs at
      least 3 samples); or
    * it is busy ``max_utilization`` (0.95) of the window or more: a queue that
      almost never empties (a stable M/M/1 queue that busy holds
      rho / (1 - rho) >= 19 requests on average: TTFT is mostly queueing anyway).

    Why 5 requests: at the intended operating point (utilization 0.7-0.8) an
    M/M/1 queue holds rho / (1 - rho) = 2.3-4 requests on average, so a rise of
    the thirds' means by more than 5 (more than a whole stable queue) with a
    positive trend is requests piling up, not a stable queue's wobble; the
    Mooncake trace is bursty, so a smaller margin flags stable windows.
    Calibrated on the shipped Mooncake trace (all 29 120-s windows of its hour,
    2 TP-8 Llama-3.1-70B prefill instances at 5k tokens/s/GPU, speeds 0.8-2.6,
    580 instance-windows), by the instance's own offered load in the window:
    below 0.7 1% flagged, 0.7-0.8 7%, 0.8-0.9 27%, 0.9-1.0 61%, 1.0-1.1 95%,
    1.1 and above 100%. With 2 requests instead: 7% / 27% below 0.8.
    """
    real_at_least("min_growth", min_growth, 0.0)
    real_positive("max_utilization", max_utilization)
    flagged = []
    for inst in point.instances:
        if inst.kind != "prefill":
            continue
        pts = point.series("prefill", inst.instance)
        k = len(pts) // 3
        first = sum(q for _, q in pts[:k]) / k if k else 0.0
        last = sum(q for _, q in pts[-k:]) / k if k else 0.0
        slope = _slope(pts) if len(pts) >= 2 else 0.0
        growing = k >= 1 and slope > 0 and last - first > min_growth
        if growing or inst.utilization >= max_utilization:
            flagged.append(f"prefill {inst.instance}: utilization {inst.utilization:.2f}, offered load "
                           f"{inst.offered_load:.2f}, queue {first:.1f} -> {last:.1f} requests "
                           f"(first -> last third), trend {slope:+.2f}/s")
    if not flagged:
        return None
    return f"{OVERLOAD_MESSAGE} ({'; '.join(flagged)})"


__all__ = ["ScheduledTransfer", "RequestTiming", "Schedule", "build_schedule", "ttft_proxy",
           "ttft_proxies", "MODES", "InstanceLoad", "QueueSample", "OperatingPoint", "operating_point",
           "overloaded", "OVERLOAD_MESSAGE", "MIN_QUEUE_GROWTH", "MAX_UTILIZATION"]
