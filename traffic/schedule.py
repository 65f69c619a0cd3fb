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
prefill end + output_tokens x ``decode_s_per_token`` (a rough decode model
used only for load balancing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from traffic._check import int_at_least, one_of, real_at_least, real_positive
from traffic.errors import TrafficError
from traffic.models import ModelSpec, dtype_bytes
from traffic.placement import Placement, Scheduler
from traffic.rankmap import kv_transfers
from traffic.traces import Request

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
        scheduler.release(req.request_id, prefill_done_s=end,
                          decode_done_s=end + req.output_tokens * decode_s_per_token)
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
                                     pick.decode.index, start, end, real_total, emu_total))
    out.sort(key=lambda t: (t.scheduled_start_s, t.request_id, t.chunk, t.dst_gpu, t.src_gpu,
                            t.slice_index))
    return Schedule(out, timings, mode, scale, chunk_bytes, warnings, threshold, checked)


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


__all__ = ["ScheduledTransfer", "RequestTiming", "Schedule", "build_schedule", "ttft_proxy",
           "ttft_proxies", "MODES"]
