"""The planned replay: every KV transfer of a trace slice timed before the run, sent by the agents.

Pipeline: trace -> slice (window, first N, speed) -> placement and scheduler
-> ``traffic.model.schedule`` (KV bytes per rank pair, scaled by the one scale
model, cut into slices) -> one plan row per transfer (``prepare``) -> a
``traffic.runtime.agent`` in every GPU namespace sends its plan over real TCP and
receives the others' (``run_agents``).

Times stay real and bytes are scaled (``testbed.scale``): a transfer of B
real bytes becomes B / bytes_scale emulated bytes, which take as long over
the emulated link as B over a real 400 Gbit/s one. NIC ports follow the
fabric model's port-selection policy: with ``striped`` the k-th transfer of
a GPU pair goes p1 -> dst p2 when k is even and p2 -> dst p1 when odd.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from testbed import scale
from testbed.emulation import fabricctl
from testbed.errors import EnvironmentProblem, TestbedError
from testbed.fabric import addressing
from testbed.fabric.routing import plan_ports
from testbed.paths import REPO, module_env
from testbed.repetition import agents
from testbed.repetition.config import RepetitionConfig
from traffic.runtime.launcher import AGENT_PORT


@dataclass
class Prepared:
    schedule: object
    plan_rows: list[dict]
    offset_s: float  # trace time of plan time 0
    requests: int
    skipped_rows: int
    warnings: list[str] = field(default_factory=list)
    represents_bps: float = scale.REAL_LINK_BPS
    operating_point: object = None  # traffic.model.schedule.OperatingPoint of the replayed window


def prepare(cfg: RepetitionConfig, n_gpus: int, rate_bps: float, mtu: int, fabric=None) -> Prepared:
    """Everything up to the per-GPU plans: pure computation, no fabric needed. ``fabric``: the
    fabric model (``testbed.fabric.build_fabric``), which the ``adaptive`` port policy needs."""
    from traffic.model import models, placement, schedule, traces

    read = traces.read_trace(cfg.trace, cfg.trace_format, skip_bad=cfg.skip_bad)
    end = cfg.start_s + cfg.duration_s
    reqs = traces.slice_requests(read.requests, start_s=cfg.start_s, end_s=end, first_n=cfg.first_n,
                                 speed=cfg.speed)
    if not reqs:
        raise TestbedError(f"the trace window {cfg.start_s:g} .. {end:g} s of {cfg.trace} holds no request")
    model = models.get_model(cfg.model)
    place = placement.place(n_gpus, cfg.prefill_tp, cfg.decode_tp, cfg.prefill_fraction)
    sched = schedule.build_schedule(reqs, place, placement.Scheduler(cfg.scheduler, cfg.seed), model, cfg.dtype,
                                    cfg.mode, cfg.chunk_bytes, scale.bytes_scale(rate_bps, cfg.represents_bps),
                                    mtu_bytes=mtu)
    if not sched.transfers:
        raise TestbedError("the schedule has no transfer: every request is empty")
    offset = min(t.scheduled_start_s for t in sched.transfers)
    # a GPU's own slice never touches the network
    net = [(i, t) for i, t in enumerate(sched.transfers) if t.src_gpu != t.dst_gpu]
    picks = plan_ports([(t.src_gpu, t.dst_gpu, t.bytes, t.scheduled_start_s) for _, t in net], cfg.policy, fabric,
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
    op = schedule.operating_point(sched, cfg.duration_s / cfg.speed)
    flag = schedule.overloaded(op)
    if flag:
        warnings.insert(0, flag)
    return Prepared(sched, rows, offset, len(reqs), read.skipped, warnings, cfg.represents_bps, op)


def _count_lines(paths: list[Path]) -> int:
    total = 0
    for p in paths:
        try:
            with open(p, "rb") as fh:
                total += fh.read().count(b"\n")
        except FileNotFoundError:
            pass
    return total


READY_TIMEOUT_S = 60.0  # every agent listening; forked agents take ~2 s for 64 here


START_MARGIN_S = 0.5  # from handing out t0 to the first scheduled start


@dataclass
class AgentsRun:
    """What the agents left after a run: where their records are, and how they fared."""

    t0: float  # CLOCK_MONOTONIC of plan time 0; the records' times are on this clock
    agents_dir: Path  # <name>.plan.jsonl, .sent.jsonl, .recv.jsonl (traffic.runtime.records.merge_results)
    crashed: dict[str, int]  # agent -> exit status, for agents that exited early or badly
    ready_s: float  # from the fork to every agent listening
    cpu_s: float  # all agents' CPU seconds, start to stop


def _wait_ready(fleet, names: list[str], agents_dir: Path, timeout_s: float) -> float:
    """Seconds until every agent said it is listening; EnvironmentProblem naming the slow ones."""
    started = time.monotonic()
    while True:
        missing = [n for n in names if not (agents_dir / f"{n}.ready").exists()]
        if not missing:
            return time.monotonic() - started
        dead = {n: rc for n, rc in fleet.exited().items() if n in missing}
        if dead:
            n = next(iter(dead))
            tail = (agents_dir / f"{n}.stderr").read_text(errors="replace").strip().splitlines()[-1:]
            raise EnvironmentProblem(f"agent {n} exited ({dead[n]}) before it was ready: {tail}")
        if not fleet.launcher_alive():
            raise EnvironmentProblem(f"the agent launcher exited ({fleet.proc.returncode}) before "
                                     f"{len(missing)} agents were ready")
        if time.monotonic() - started > timeout_s:
            load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
            raise EnvironmentProblem(f"{len(missing)} of {len(names)} agents were not listening after {timeout_s:g} s "
                                     f"({', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}); "
                                     f"load average {load} on {os.cpu_count()} CPUs")
        time.sleep(0.02)


def run_agents(st, prepared: Prepared, run_dir: Path, timeout_s: float, connections: str, log=print,
               ready_timeout_s: float = READY_TIMEOUT_S, on_t0=None) -> AgentsRun:
    """Start one agent per GPU, hand out the common t0 once all listen, wait for the plan, stop them.
    ``on_t0``: called with t0 once it is handed out (the fault schedule starts its clock there)."""
    from traffic.runtime import records
    from traffic.runtime.launcher import Fleet

    agents_dir = run_dir / "agents"
    gpus = list(fabricctl.fabric_of_state(st).gpus())
    names = [f"gpu{g}" for g in gpus]
    plans = records.write_plans(prepared.plan_rows, agents_dir, agents=names)
    specs = agents.agent_specs(gpus, agents.plan_orders(plans), agents_dir, timeout_s, connections)
    fleet = Fleet(specs, agents_dir / "launcher.json", cwd=REPO,
                  env=module_env())
    crashed: dict[str, int] = {}
    try:
        ready_s = _wait_ready(fleet, names, agents_dir, ready_timeout_s)
        log(f"{len(names)} agents listening after {ready_s:.2f} s")
        t0 = time.monotonic() + START_MARGIN_S
        fleet.go(t0)
        if on_t0 is not None:
            on_t0(t0)
        last_start = max(r["start"] for r in prepared.plan_rows)
        deadline = t0 + last_start + timeout_s + 5
        sent_files = [agents_dir / f"{n}.sent.jsonl" for n in names]
        total = len(prepared.plan_rows)
        log(f"replaying {total} transfers over {last_start:.1f} s")
        progress = _progress(total)
        while time.monotonic() < deadline:
            crashed = fleet.exited()
            done_names = {n for n in names if (agents_dir / f"{n}.done").exists()}
            progress(_count_lines(sent_files), time.monotonic() - t0)
            if len(done_names | set(crashed)) == len(names):
                break
            time.sleep(0.5)
        progress(_count_lines(sent_files), time.monotonic() - t0, final=True)
        time.sleep(0.5)  # receivers log the last bytes of what the senders saw acked
    finally:
        before_stop = set(fleet.exited())
        exits = fleet.stop()
        crashed = {n: rc for n, rc in exits.items() if n in before_stop or rc != 0}
        crashed |= {n: -9 for n in names if n not in exits}
    return AgentsRun(t0, agents_dir, crashed, round(ready_s, 3), round(sum(fleet.cpu_s.values()), 3))


def _progress(total: int):
    """A one-line progress display (rich when stderr is a terminal, else quiet)."""
    if not sys.stderr.isatty():
        return lambda done, elapsed, final=False: None
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("replay"), BarColumn(), TextColumn("{task.completed}/{task.total} transfers"),
                   TimeElapsedColumn(), transient=False)
    task = bar.add_task("replay", total=total)
    bar.start()

    def update(done: int, elapsed: float, final: bool = False) -> None:
        bar.update(task, completed=done)
        if final:
            bar.stop()

    return update

