"""The planned replay: every KV transfer of a trace slice timed before the run, sent by the agents.

Pipeline: trace -> slice (window, first N, speed) -> placement and scheduler
-> ``traffic.model.schedule`` (KV bytes per rank pair, scaled by the one scale
model, cut into slices) -> one plan row per transfer (``prepare``) -> a
network backend sends each at its start (on the emulated fabric: a ``traffic.runtime.agent`` in
every GPU namespace sends its plan over real TCP and receives the others').

Times stay real and bytes are scaled (``common.scale``): a transfer of B
real bytes becomes B / bytes_scale emulated bytes, which take as long over
the emulated link as B over a real 400 Gbit/s one. NIC ports follow the
fabric model's port-selection policy: with ``striped`` the k-th transfer of
a GPU pair goes p1 -> dst p2 when k is even and p2 -> dst p1 when odd.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from common import scale
from common.errors import TestbedError
from fabrics import Fabric, addressing
from fabrics.routing import plan_ports
from testbed.backends.base import Backend, Carried, LinkSettings, Log, Network, PlannedTraffic
from testbed.repetition.drivers.base import Driver, conditions
from testbed.repetition.spec import RepetitionSpec, served_requests
from testbed.repetition.writeup import write_operating_point
from traffic.runtime.launcher import AGENT_PORT


@dataclass
class PlanSetup:
    """The planned replay's traffic: one plan row per transfer that crosses the network."""

    schedule: object  # traffic.model.schedule.Schedule
    plan_rows: list[dict]  # traffic.runtime.records.PLAN_KEYS (+ request_id, dst, alt_src_ip, alt_dst_ip)
    offset_s: float  # trace time of plan time 0
    requests: int
    skipped_rows: int
    warnings: list[str] = field(default_factory=list)
    operating_point: object = None  # traffic.model.schedule.OperatingPoint of the replayed window


def prepare_plan(spec: RepetitionSpec, n_gpus: int, rate_bps: float, mtu: int, fabric=None) -> PlanSetup:
    """Everything up to the per-GPU plans: pure computation, no fabric needed. ``fabric``: the
    fabric model (``fabrics.build_fabric``), which the ``adaptive`` port policy needs."""
    from traffic.model import models, placement, schedule

    cfg, tr, s = spec, spec.trace, spec.serving
    reqs, skipped = served_requests(spec)
    model = models.get_model(s.model)
    place = placement.place(n_gpus, s.prefill_tp, s.decode_tp, s.prefill_fraction)
    sched = schedule.build_schedule(reqs, place, placement.Scheduler(s.scheduler, cfg.seed), model, s.dtype,
                                    s.mode, cfg.chunk_bytes, scale.bytes_scale(rate_bps, cfg.represents_bps),
                                    mtu_bytes=mtu, mla_sender=s.mla_sender)
    if not sched.transfers:
        raise TestbedError("the schedule has no transfer: every request is empty")
    offset = min(t.scheduled_start_s for t in sched.transfers)
    # a GPU's own slice never touches the network
    net = [(i, t) for i, t in enumerate(sched.transfers) if t.src_gpu != t.dst_gpu]
    picks = plan_ports([(t.src_gpu, t.dst_gpu, t.bytes, t.scheduled_start_s) for _, t in net], s.policy, fabric,
                       rate_bps)
    rows = []
    for (i, t), c in zip(net, picks):
        rows.append({"id": i, "request_id": t.request_id, "src": f"gpu{t.src_gpu}", "dst": f"gpu{t.dst_gpu}",
                     "src_ip": addressing.ip_of(t.src_gpu, c.src_port),
                     "dst_ip": addressing.ip_of(t.dst_gpu, c.dst_port), "dst_port": AGENT_PORT,
                     "bytes": t.bytes, "start": round(t.scheduled_start_s - offset, 6),
                     **addressing.alt_ips(t.src_gpu, c.src_port, t.dst_gpu, c.dst_port)})
    warnings = []
    if sched.fidelity_warnings:
        warnings.append(f"{sched.fidelity_warnings} of {sched.checked_chunks} KV chunks are under "
                        f"{sched.fidelity_threshold_bytes} emulated bytes (a few packets): TCP dynamics barely "
                        "matter for them")
    op = schedule.operating_point(sched, tr.duration_s / tr.speed)
    flag = schedule.overloaded(op)
    if flag:
        warnings.insert(0, flag)
    return PlanSetup(sched, rows, offset, len(reqs), skipped, warnings, op)


def ttft_proxies(plan: PlanSetup, rows: list[dict]) -> list[float]:
    """Each request's time to first token as the planned replay has it: its last KV byte's arrival plus
    the decode's first step (``traffic.model.schedule.ttft_proxies``)."""
    from traffic.model import schedule

    ends: dict[int, float] = {}
    for r in rows:
        if r["end"] is not None:
            ends[r["request_id"]] = max(ends.get(r["request_id"], 0.0), r["end"] + plan.offset_s)
    return list(schedule.ttft_proxies(plan.schedule, ends, allow_missing=True).values())


class PlanDriver(Driver):
    """Every KV transfer timed from the trace before the run."""

    name = "plan"

    def prepare(self, spec: RepetitionSpec, net: Network) -> PlanSetup:
        return prepare_plan(spec, net.model.n_gpus, net.link.rate_bps, net.link.mtu, net.model)

    def run(self, prepared: PlanSetup, backend: Backend, spec: RepetitionSpec, run_dir: Path, log: Log) -> Carried:
        traffic = PlannedTraffic(prepared.plan_rows)
        return backend.carry(spec.fabric, traffic, conditions(spec, traffic.last_start_s), run_dir, log)

    def summarize(self, prepared: PlanSetup, carried: Carried, rows: list[dict], run_dir: Path, fabric: Fabric,
                  link: LinkSettings) -> dict:
        return plan_summary(prepared, rows, run_dir)


def plan_summary(prepared: PlanSetup, rows: list[dict], run_dir: Path) -> dict:
    """The planned replay's entries of summary.json: its requests, their TTFT proxies, the KV bytes and the
    operating point of the replayed window (operating_point.json)."""
    from traffic.model.metrics import rounded_percentiles

    out = {"requests": prepared.requests,
           "ttft_ms": rounded_percentiles(ttft_proxies(prepared, rows), ("p50", "p99"), 1e3),
           "kv_bytes": sum(t.kv_bytes for t in prepared.schedule.requests)}
    if prepared.operating_point is not None:
        out |= write_operating_point(run_dir, prepared.operating_point)
    return out
