"""Replay prefill-to-decode KV-cache transfers from a trace over a running fabric.

Pipeline: trace -> slice (window, first N, speed) -> placement and scheduler
-> ``traffic.model.schedule`` (KV bytes per rank pair, scaled by the one scale
model, cut into slices) -> one plan per GPU -> a ``traffic.runtime.agent`` in every
GPU namespace sends its plan over real TCP and receives the others' ->
merged per-transfer rows: ``transfers.csv``, ``fct.txt`` (HPCC style),
``summary.json``, ``queues.csv`` (every queue sampled about once a second),
``links.csv`` (per-queue bytes and utilization), ``nics.csv`` (per NIC port),
``goodput.csv`` (per second), ``slowdown_bins.json`` (by size quantile bins),
``link_traffic.csv`` (per link, the KV and EP bytes the fabric model routes over it and
who they belong to: ``testbed.repetition.link_traffic``).

Times stay real and bytes are scaled (``testbed.scale``): a transfer of B
real bytes becomes B / bytes_scale emulated bytes, which take as long over
the emulated link as B over a real 400 Gbit/s one. NIC ports follow the
fabric model's port-selection policy: with ``striped`` the k-th transfer of
a GPU pair goes p1 -> dst p2 when k is even and p2 -> dst p1 when odd.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from testbed import scale
from testbed.emulation import fabricctl
from testbed.emulation.datapath import DatapathConfig, netns_of
from testbed.errors import EnvironmentProblem, TestbedError
from testbed.fabric import addressing
from testbed.fabric.routing import DEFAULT_POLICY, POLICIES, plan_ports
from testbed.paths import DEFAULT_TRACE, REPO, TRACES_DIR, module_env  # noqa: F401 (DEFAULT_TRACE, TRACES_DIR: aliases)
from testbed.repetition import agents, link_traffic
from traffic.runtime.agent import CONNECTION_MODES
from traffic.runtime.launcher import AGENT_PORT

DRIVERS = ("plan", "live")
HEADER_BYTES = 66  # Ethernet 14 + IPv4 20 + TCP with timestamps 32, per packet


@dataclass
class ReplayConfig:
    trace: str = str(DEFAULT_TRACE)
    trace_format: str = "auto"
    skip_bad: bool = False
    start_s: float = 0.0  # trace window start (trace seconds)
    duration_s: float = 120.0  # trace seconds replayed (after speed-up: wall seconds = duration / speed)
    first_n: int | None = None
    speed: float = 1.5
    model: str = "llama-3.1-70b"
    dtype: str = "bf16"
    prefill_tp: int = 8
    decode_tp: int = 2
    prefill_fraction: float = 0.5
    scheduler: str = "round_robin"
    seed: int = 0
    mode: str = "whole"
    chunk_bytes: int | None = 65536
    policy: str = DEFAULT_POLICY
    transfer_timeout_s: float = 60.0
    cross_flows: int = 0  # background iperf3 flows (random GPU pairs, seeded) for the whole replay
    represents_bps: float = scale.REAL_LINK_BPS  # the real link an emulated one stands for
    connections: str = CONNECTION_MODES[0]  # the agents' --connections: persistent
    # the live driver (testbed/repetition/live.py): serving with the network in the loop
    driver: str = "plan"  # plan: every KV transfer timed before the run; live: a coordinator runs the cluster
    arrivals: str = "trace"  # live: trace-timed arrivals, or closed loop with `concurrency` requests in flight
    concurrency: int = 64
    prefill_ep: int | None = None  # live, MoE: GPUs per prefill EP group (None: all prefill GPUs)
    layout: str | None = None  # live, MoE: a named serving layout (traffic.model.placement.SERVING_LAYOUTS)
    decode_ep: int | None = None
    decode_batch: int = 256
    decode_step_s: float = 0.030
    prefill_chunk_tokens: int = 512
    popularity: str = "uniform"
    zipf_s: float = 1.0
    time_dilation: float = 1.0
    warmup_s: float = 0.0
    gpus_per_server: int = 8  # live: servers are whole groups of this many GPUs (NVLink inside)
    faults: tuple = ()  # {at, duration, target, action} dicts (fault_schedule), checked by the schema

    def validate(self) -> "ReplayConfig":
        if self.policy not in POLICIES:
            raise TestbedError(f"policy {self.policy!r} is unknown: expected one of {', '.join(POLICIES)}")
        if not self.duration_s > 0:
            raise TestbedError(f"duration {self.duration_s:g} s is not positive: expected e.g. 120s")
        if self.connections not in CONNECTION_MODES:
            raise TestbedError(f"connections {self.connections!r} is unknown: expected one of "
                               f"{', '.join(CONNECTION_MODES)}")
        if self.driver not in DRIVERS:
            raise TestbedError(f"driver {self.driver!r} is unknown: expected one of {', '.join(DRIVERS)}")
        if not self.time_dilation >= 1:
            raise TestbedError(f"time dilation {self.time_dilation:g} is below 1: expected 1 (none) or more")
        if self.driver == "plan" and (self.arrivals != "trace" or self.time_dilation != 1):
            raise TestbedError("closed-loop arrivals and time dilation need serving.driver live; the planned replay "
                               "times every transfer from the trace")
        if not self.represents_bps > 0:
            raise TestbedError(f"represents {self.represents_bps:g} bit/s is not positive: expected e.g. 400gbit")
        if not self.speed > 0:
            raise TestbedError(f"speed {self.speed:g} is not positive: expected e.g. 1 or 10")
        if Path(self.trace).is_dir():
            raise TestbedError(f"trace {self.trace} is a directory: expected a Mooncake JSONL or Azure CSV file "
                               "(plain or .gz)")
        if not Path(self.trace).is_file():
            raise TestbedError(f"trace {self.trace} does not exist: expected a Mooncake JSONL or Azure CSV file "
                               "(plain or .gz)")
        return self


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


def prepare(cfg: ReplayConfig, n_gpus: int, rate_bps: float, mtu: int, fabric=None) -> Prepared:
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


CROSS_PORT = 5400


def start_cross_traffic(st: dict, n_flows: int, seed: int, seconds: float) -> list:
    """``n_flows`` iperf3 flows between random GPU pairs (p1 -> dst p2), through the binding."""
    import random

    fabric = fabricctl.fabric_of_state(st)
    rng = random.Random(seed)
    gpus = list(fabric.gpus())
    flows = []
    for i in range(n_flows):
        src, dst = rng.sample(gpus, 2)
        port = CROSS_PORT + i
        py = [sys.executable, "-m", "traffic.runtime.cross"]
        env = module_env()
        server = subprocess.Popen(["ip", "netns", "exec", netns_of(dst), *py, "server", "--bind",
                                   addressing.ip_of(dst, 2), "--port", str(port)], cwd=REPO, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        flows.append({"src": f"gpu{src}", "dst": f"gpu{dst}", "server": server, "client": None,
                      "argv": ["ip", "netns", "exec", netns_of(src), *py, "client", "--bind", addressing.ip_of(src, 1),
                               "--to", addressing.ip_of(dst, 2), "--port", str(port), "--duration",
                               str(int(seconds) + 1)], "env": env})
    time.sleep(0.5)
    for f in flows:
        f["client"] = subprocess.Popen(f["argv"], cwd=REPO, env=f["env"], stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, text=True)
    return flows


def stop_cross_traffic(flows: list) -> dict:
    """Collect the flows' goodput (a flow still running is stopped and counted as 0)."""
    rows = []
    for f in flows:
        try:
            out, _ = f["client"].communicate(timeout=15)
            doc = json.loads(out or "{}")
        except (subprocess.TimeoutExpired, json.JSONDecodeError):
            f["client"].kill()
            doc = {}
        for proc in (f["client"], f["server"]):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        rows.append({"src": f["src"], "dst": f["dst"], "bps": doc.get("bps", 0.0), "error": doc.get("error")})
    return {"flows": len(rows), "goodput_bps": round(sum(r["bps"] for r in rows)), "per_flow": rows}


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


def run_agents(st: dict, prepared: Prepared, run_dir: Path, timeout_s: float, connections: str, log=print,
               ready_timeout_s: float = READY_TIMEOUT_S, on_t0=None) -> dict:
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
    return {"t0": t0, "crashed": crashed, "agents_dir": agents_dir, "agents_ready_s": round(ready_s, 3),
            "agents_cpu_s": round(sum(fleet.cpu_s.values()), 3)}


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


def summarize(fabric_name: str, rows: list[dict], prepared: Prepared, rate_bps: float, mtu: int,
              drops: int, crashed: dict, warnings: list[str]) -> dict:
    """The replay summary (its keys are a contract: README, tests and the report read them) from merged rows."""
    from traffic.model import metrics, schedule
    from traffic.runtime import records

    ok = [r for r in rows if r["verified"]]
    retried, moved = records.retry_counts(rows)
    fct_s = [r["end"] - r["start"] for r in ok]
    lateness = [r["start"] - r["scheduled_start"] for r in rows if r["start"] is not None]
    first = min((r["start"] for r in ok), default=0.0)
    last = max((r["end"] for r in ok), default=0.0)
    nbytes = sum(r["bytes"] for r in ok)
    ends: dict[int, float] = {}
    for r in rows:
        if r["end"] is not None:
            ends[r["request_id"]] = max(ends.get(r["request_id"], 0.0), r["end"] + prepared.offset_s)
    ttft = list(schedule.ttft_proxies(prepared.schedule, ends, allow_missing=True).values()) \
        if prepared.schedule is not None else []
    b_scale = scale.bytes_scale(rate_bps, prepared.represents_bps)

    def pct(values: list[float], keys=("p50", "p99", "p999"), factor: float = 1e3) -> dict:
        """Nearest-rank percentiles (times in ms by default); None when nothing was measured."""
        return metrics.rounded_percentiles(values, keys, factor)

    slowdowns = [metrics.fct_slowdown(f, r["bytes"], rate_bps, mtu_payload=mtu - 52, header_bytes=HEADER_BYTES)
                 for f, r in zip(fct_s, ok)]
    goodput = nbytes * 8 / (last - first) if last > first else 0.0
    return {
        "fabric": fabric_name,
        "transfers": len(rows),
        "verified": len(ok),
        "failed": len(rows) - len(ok),
        "transfers_retried": retried,  # resent once after a dead connection (traffic.runtime.agent)
        "transfers_moved": moved,  # sent over the other NIC port pair
        "requests": prepared.requests,
        "bytes": nbytes,
        "goodput_bps": round(goodput),
        "goodput_real_equivalent_bps": round(goodput * b_scale),
        "fct_ms": pct(fct_s),
        "slowdown": pct(slowdowns, ("p50", "p95", "p99", "p999"), factor=1.0),
        "ttft_ms": pct(ttft, ("p50", "p99")),
        "start_lateness_ms": pct(lateness, ("p50", "p99")),
        "requests_per_s": round(len({r["request_id"] for r in ok}) / (last - first), 3) if last > first else 0.0,
        "queue_drops": drops,
        "crashed_agents": crashed,
        "rate_bps": rate_bps,
        "bytes_scale": b_scale,
        "represents_bps": prepared.represents_bps,
        # the live driver's keys, as a planned replay has them: no serving loop, no expert traffic
        "driver": "plan", "time_dilation": 1.0, "closed_loop": False, "throughput_tokens_per_s": None,
        "ep_bytes": 0,
        "kv_bytes": sum(t.kv_bytes for t in prepared.schedule.requests) if prepared.schedule is not None else None,
        "transfer_packets": {"p50": metrics.percentile([-(-r["bytes"] // max(1, mtu - 52)) for r in ok], 50)
                             if ok else None},
        "warnings": warnings,
    }


class QueueSampler:
    """Samples every fabric queue (backlog, drops, bytes sent) through netlink
    about once a second into queues.csv; keeps the first and last sample for
    per-link totals and drops.

    Only complete samples count: a queue without its bfifo counters (device or
    namespace already gone) ends the sampling instead of reading as 0, which is
    what gave links.csv negative bytes when the last sample ran into the
    fabric's teardown. ``start`` returns after the first sample (the
    counters start from a quiet fabric); ``stop`` waits for the last; a sample
    that finishes after ``stop`` gave up waiting is discarded. Errors (the
    fabric went away under the thread) end the thread quietly and are kept in
    ``error``; counters that went down between consecutive samples are kept in
    ``regressions``."""

    PERIOD_S = 1.0
    WAIT_S = 30.0  # longest start() waits for the first sample and stop() for the last

    def __init__(self, st: dict, path: Path) -> None:
        self.st, self.path = st, path
        self.first: dict[str, dict] = {}
        self.last: dict[str, dict] = {}
        self.t_first = self.t_last = 0.0
        self.read_s = 0.0  # the longest sample read
        self.samples = 0
        self.error: str | None = None
        self.regressions: list[str] = []
        self._closed = False
        self._lock = threading.Lock()
        self._first_done = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="queue-sampler", daemon=True)

    def _sample(self, fh) -> None:
        from testbed.repetition import invariants

        t = time.monotonic()
        rows = {q["queue"]: q for q in fabricctl.read_queues(self.st)}
        gone = [q for q, r in rows.items() if "bytes" not in r]
        if gone:
            raise EnvironmentProblem(f"{len(gone)} of {len(rows)} queues have no counters (e.g. {gone[0]}): "
                                     "the fabric is going away")
        with self._lock:
            if self._closed:
                return
            self.read_s = max(self.read_s, time.monotonic() - t)
            if self.last:
                self.regressions += invariants.counter_regressions(self.last, rows, self.t_last, t)
            if not self.first:
                self.first, self.t_first = rows, t
            self.last, self.t_last = rows, t
            self.samples += 1
            for q in rows.values():
                fh.write(f"{t:.3f},{q['queue']},{q['towards']},{q['backlog']},{q['drops']},{q['bytes']}\n")

    def _run(self) -> None:
        try:
            with open(self.path, "w") as fh:
                fh.write("time,queue,towards,backlog_bytes,drops,sent_bytes\n")
                while True:
                    self._sample(fh)
                    self._first_done.set()
                    if self._stop.wait(self.PERIOD_S):
                        self._sample(fh)
                        return
        except Exception as exc:  # noqa: BLE001 - e.g. FileNotFoundError: /run/netns/tb-gpu1 (fabric gone)
            if not self._closed:
                self.error = f"sampling stopped after {self.samples} samples: {type(exc).__name__}: {exc}"
        finally:
            self._first_done.set()

    def start(self) -> None:
        self._thread.start()
        self._first_done.wait(self.WAIT_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.WAIT_S)
        with self._lock:
            self._closed = True
            if self._thread.is_alive() and self.error is None:
                self.error = f"the last sample did not finish within {self.WAIT_S:g} s of stop: the counters end early"

    def drops(self, kind: str | None = None) -> int:
        """Packets the queues (of ``kind``: "switch" or "nic", default all) dropped during the run."""
        kinds = {q["qid"]: q["kind"] for q in self.st["queues"]}
        return sum(self.last[q]["drops"] - self.first[q]["drops"] for q in self.last
                   if q in self.first and kind in (None, kinds.get(q)))

    def link_bytes(self) -> dict[str, tuple[str, int]]:
        """queue -> (what it feeds, bytes it sent during the run)."""
        return {q: (r["towards"], r["bytes"] - self.first[q]["bytes"]) for q, r in self.last.items() if q in self.first}


def write_breakdowns(run_dir: Path, rows: list[dict], sampler: QueueSampler, rate_bps: float, mtu: int) -> dict:
    """Per-link utilization (hotspots), per-NIC-port bytes (a server's NIC
    imbalance), goodput per second, FCT slowdown by size bin."""
    from traffic.model import metrics
    from traffic.runtime import records

    span = max(sampler.t_last - sampler.t_first, 1e-9)
    util = {q: (towards, nbytes, nbytes * 8 / span / rate_bps) for q, (towards, nbytes) in sampler.link_bytes().items()}
    with open(run_dir / "links.csv", "w") as fh:
        fh.write("queue,towards,bytes,utilization\n")
        for q, (towards, nbytes, u) in sorted(util.items()):
            fh.write(f"{q},{towards},{nbytes},{u:.4f}\n")
    nic: dict[str, list[int]] = {}  # ip -> sent, received, of which expert-parallel: sent, received
    for r in rows:
        if r["verified"]:
            ep = r.get("kind") in ("dispatch", "combine")
            for ip, i in zip(records.sent_pair(r), (0, 1)):  # the NIC ports it went over
                loads = nic.setdefault(ip, [0, 0, 0, 0])
                loads[i] += r["bytes"]
                loads[i + 2] += r["bytes"] if ep else 0
    with open(run_dir / "nics.csv", "w") as fh:
        fh.write("gpu,port,ip,sent_bytes,received_bytes,ep_sent_bytes,ep_received_bytes\n")
        for ip, (tx, rx, ep_tx, ep_rx) in sorted(nic.items(), key=lambda kv: tuple(int(x) for x in kv[0].split("."))):
            port, gpu = int(ip.split(".")[1]), int(ip.split(".")[2]) * 256 + int(ip.split(".")[3])
            fh.write(f"gpu{gpu},{port},{ip},{tx},{rx},{ep_tx},{ep_rx}\n")
    per_s: dict[int, int] = {}
    for r in rows:
        if r["verified"]:
            per_s[int(r["end"])] = per_s.get(int(r["end"]), 0) + r["bytes"]
    with open(run_dir / "goodput.csv", "w") as fh:
        fh.write("second,bytes,goodput_bps\n")
        for sec in range(0, max(per_s, default=-1) + 1):
            fh.write(f"{sec},{per_s.get(sec, 0)},{per_s.get(sec, 0) * 8}\n")
    ok = [r for r in rows if r["verified"]]
    if ok:
        slow = [metrics.fct_slowdown(r["end"] - r["start"], r["bytes"], rate_bps, mtu_payload=mtu - 52,
                                     header_bytes=HEADER_BYTES) for r in ok]
        bins = metrics.binned_slowdowns([r["bytes"] for r in ok], slow)
        (run_dir / "slowdown_bins.json").write_text(json.dumps(bins, indent=1))
    hot = max(util.items(), key=lambda kv: kv[1][2], default=None)
    return {"hottest_queue": hot[0] if hot else None,
            "max_link_utilization": round(hot[1][2], 4) if hot else None}


def check_invariants(run_dir: Path, st: dict, sampler: QueueSampler, rows: list[dict], pfc_enabled: bool,
                     faults: list[dict] | None = None) -> dict:
    """The measurement invariants (testbed.repetition.invariants) on this run's samples, transfers and pause log;
    ``faults``: the fault actions applied (a switch with a cable cut loses bytes no counter sees)."""
    from testbed.repetition import invariants

    events = []
    if pfc_enabled and (run_dir / "pfc.txt").is_file():
        from pfc import analysis

        events = [(e.time_ns, e.queue, e.event) for e in analysis.read_events(run_dir / "pfc.txt")]
    cfg = st["config"]
    return invariants.check_all(st["queues"], sampler.first, sampler.last, span_s=sampler.t_last - sampler.t_first,
                                rate_bps=cfg["rate_bps"], burst_bytes=cfg["burst_bytes"], frame_bytes=cfg["mtu"] + 14,
                                rows=rows, pfc_enabled=pfc_enabled, pause_events=events,
                                regressions=sampler.regressions, sampler_error=sampler.error, read_s=sampler.read_s,
                                cut_switches=cut_switches(fabricctl.fabric_of_state(st), faults or []))


def cut_switches(fabric, faults: list[dict]) -> frozenset[str]:
    """Switches at an end of a cable that a fault took down (a dead switch: it and its neighbours)."""
    from testbed.fabric.failover import far_end, parse_target

    out: set[str] = set()
    for ev in faults:
        if ev["action"] == "down":
            for end in parse_target(fabric, ev["target"]).cut_ends(fabric):
                out |= {node for node, _ in (end, far_end(fabric, end)) if node in fabric.switches}
    return frozenset(out)


def write_operating_point(run_dir: Path, op) -> dict:
    """instances.csv (utilization, offered load, queue per serving instance) and queue.csv (each
    instance's queue over time): whether the cluster kept up, so TTFT is not the queue unnoticed."""
    import csv

    for name, rows in (("instances.csv", op.instance_rows()), ("queue.csv", op.queue_rows())):
        with open(run_dir / name, "w", newline="") as fh:
            if rows:
                w = csv.DictWriter(fh, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
    return {"prefill_utilization": {str(k): round(v, 4) for k, v in op.utilization("prefill").items()},
            "decode_utilization": {str(k): round(v, 4) for k, v in op.utilization("decode").items()}}


def _pfc_snapshot(st: dict) -> dict | None:
    """The PFC helper's status and the fabric's pause log, read before the fabric goes down."""
    if not st.get("pfc", {}).get("enabled"):
        return None
    sdir = Path(st["state_dir"])
    time.sleep(1.2)  # the helper flushes its log and status once a second
    try:
        status = json.loads((sdir / "pfc_status.json").read_text())
    except (OSError, ValueError):
        status = {}
    try:
        log_text = (sdir / "pfc.txt").read_text()
    except OSError:
        log_text = ""
    return {"status": status, "log": log_text}


def write_pfc_outputs(run_dir: Path, st: dict, snap: dict | None, rows: list[dict], t0: float, t_end: float,
                      drops: int) -> dict:
    """pfc.txt (the run's slice of the pause log), pfc_ports.csv, and the summary's "pfc" block:
    pauses, per-port figures, how far pauses spread, victim flows, the lossless verdict."""
    if snap is None:
        return {"enabled": False, "pauses": 0, "resumes": 0, "lossless_ok": None}
    from pfc import analysis

    t0_ns, t_end_ns = int(t0 * 1e9), int(t_end * 1e9)
    lines = [ln for ln in snap["log"].splitlines() if ln.strip() and t0_ns - 5e9 <= int(ln.split()[0]) <= t_end_ns]
    (run_dir / "pfc.txt").write_text("".join(ln + "\n" for ln in lines))
    events = analysis.read_events(run_dir / "pfc.txt")
    ports = analysis.port_stats(events, t0_ns, t_end_ns)
    analysis.write_port_stats_csv(run_dir / "pfc_ports.csv", ports)
    spread = analysis.spread(events)
    transfers = [{"request_id": r["request_id"], "src": r["src"], "dst": r["dst"], "src_ip": r["src_ip"],
                  "dst_ip": r["dst_ip"], "start_ns": int((t0 + r["start"]) * 1e9),
                  "end_ns": int((t0 + r["end"]) * 1e9)}
                 for r in rows if r["start"] is not None and r["end"] is not None]
    fabric = fabricctl.fabric_of_state(st)
    victims = analysis.victim_flows(events, transfers, fabric)
    status = snap["status"]
    return {
        "enabled": True,
        "pauses": sum(1 for e in events if e.event == 1),
        "resumes": sum(1 for e in events if e.event == 0),
        "ports_paused": len(ports),
        "paused_fraction_max": max((p["paused_fraction"] for p in ports), default=0.0),
        "max_spread_hops": spread["max_hops"],
        "congestion_roots": spread["roots"],
        "victim_flows": len(victims),
        "flows": len(transfers),
        "pause_latency_ms": status.get("pause_latency_ms"),
        "resume_latency_ms": status.get("resume_latency_ms"),
        "helper_netlink_errors": status.get("netlink_errors"),
        "lossless_ok": drops == 0,
    }


@dataclass
class _Measured:
    """What a replay on the fabric left to write up: the agents' outcome and the fabric's counters."""

    st: dict
    res: dict
    sampler: QueueSampler
    drops: int
    fabric_drops: int
    t_end: float
    pfc_state: dict | None
    cross_result: dict | None
    faults: list[dict] | None = None  # the fault actions as applied (None: the experiment has none)
    fault_errors: list[str] | None = None  # fault actions that could not be applied


def replay(fabric_args: dict, dp: DatapathConfig, cfg: ReplayConfig, out_root: Path | None = None, log=print,
           run_dir: Path | None = None, pfc=None) -> Path:
    """Bring the fabric up if none is (down again at the end), replay, write the run directory
    (``run_dir``, or a new ``<out_root>/<run-id>``). ``pfc``: PfcConfig or its dict, for a fabric
    this call brings up (a running fabric keeps its own)."""
    if isinstance(pfc, dict):
        from pfc.policy import PfcConfig

        pfc = PfcConfig.from_dict(pfc)
    cfg.validate()
    st = fabricctl.load_state()
    if st is not None and (st["fabric"]["kind"] != fabric_args["kind"] or st["fabric"]["gpus"] != fabric_args["gpus"]):
        raise TestbedError(f"a different fabric is up ({st['fabric']['kind']}, {st['fabric']['gpus']} GPUs): "
                           "run 'testbed down' first")
    rate = st["config"]["rate_bps"] if st else dp.rate_bps
    mtu = st["config"]["mtu"] if st else dp.mtu
    prepared, live = _prepare_traffic(cfg, fabric_args, st, rate, mtu)  # bad input fails before anything is built
    if run_dir is None:
        run_dir = Path(out_root) / (time.strftime("%Y%m%d-%H%M%S") + f"-{fabric_args['kind']}{fabric_args['gpus']}")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=False)
    measured = _run_on_fabric(st, fabric_args, dp, pfc, cfg, prepared, live, run_dir, log)
    _write_results(run_dir, cfg, prepared, live, measured, rate, mtu)
    return run_dir


def _prepare_traffic(cfg: ReplayConfig, fabric_args: dict, st, rate: float, mtu: int):
    """(Prepared, LiveSetup or None): the planned replay's per-GPU plans, or the live driver's config."""
    if cfg.driver == "live":
        from testbed.repetition.live import prepare_live

        live = prepare_live(cfg, fabric_args["gpus"], rate)
        return Prepared(None, [], 0.0, live.requests, 0, [], cfg.represents_bps), live
    from testbed.fabric import build_fabric

    model = fabricctl.fabric_of_state(st) if st else build_fabric(**fabric_args)  # paths for the adaptive policy
    return prepare(cfg, fabric_args["gpus"], rate, mtu, model), None


def _run_on_fabric(st, fabric_args: dict, dp: DatapathConfig, pfc, cfg: ReplayConfig, prepared: Prepared, live,
                   run_dir: Path, log) -> _Measured:
    """Sample the queues and run the agents (and cross traffic) on the fabric, bringing it up and down
    again when none was up."""
    own = st is None
    try:
        if own:
            fabricctl.require_root()
            st = fabricctl.up(fabric_args, dp, log=log, pfc=pfc)
        sampler = QueueSampler(st, run_dir / "queues.csv")
        sampler.start()
        last = (live.config["spec"]["duration_s"] * cfg.time_dilation if live
                else max(r["start"] for r in prepared.plan_rows))
        cross = start_cross_traffic(st, cfg.cross_flows, cfg.seed, last) if cfg.cross_flows else []
        scheduler = None
        if cfg.faults:
            from testbed.repetition.fault_schedule import FaultScheduler

            scheduler = FaultScheduler(list(cfg.faults), cfg.time_dilation if live else 1 / cfg.speed,
                                       run_dir / "faults.jsonl", log)
        on_t0 = scheduler.start if scheduler else None
        try:
            if live:
                from testbed.repetition.live import run_live

                res = run_live(st, live, run_dir, cfg.transfer_timeout_s, cfg.connections, log, on_t0=on_t0)
            else:
                res = run_agents(st, prepared, run_dir, cfg.transfer_timeout_s, cfg.connections, log, on_t0=on_t0)
        finally:
            events = scheduler.finish() if scheduler else None
            fault_errors = scheduler.errors if scheduler else None
            cross_result = stop_cross_traffic(cross) if cross else None
            sampler.stop()
        return _Measured(st, res, sampler, sampler.drops(), sampler.drops("switch"), time.monotonic(),
                         _pfc_snapshot(st), cross_result, events, fault_errors)
    finally:
        if own and fabricctl.load_state() is not None:
            fabricctl.down()


def _write_results(run_dir: Path, cfg: ReplayConfig, prepared: Prepared, live, m: _Measured, rate: float,
                   mtu: int) -> None:
    """transfers.csv (KV), messages.csv (EP), fct.txt, the breakdowns, summary.json, config.json and
    link_traffic.csv."""
    from traffic.model import metrics
    from traffic.runtime import records

    st, res = m.st, m.res
    all_rows = records.merge_results(res["agents_dir"], t0=res["t0"])
    rows = [r for r in all_rows if r.get("kind") in (None, "kv")]  # KV transfers; EP messages apart
    messages = [r for r in all_rows if r.get("kind") not in (None, "kv")]
    records.write_transfers_csv(rows, run_dir / "transfers.csv")
    if live:
        records.write_transfers_csv(messages, run_dir / "messages.csv", extra=("kind", "engine", "step"))
    fct_records = [metrics.FctRecord(int(r["src"][3:]), int(r["dst"][3:]), int(r["bytes"]),
                                 int(round(r["start"] * 1e9)), int(round((r["end"] - r["start"]) * 1e9)),
                                 int(round(metrics.ideal_fct_s(r["bytes"], rate, mtu_payload=mtu - 52,
                                                               header_bytes=HEADER_BYTES) * 1e9)))
               for r in rows if r["verified"]]
    metrics.write_fct_txt(run_dir / "fct.txt", fct_records)
    warnings = list(prepared.warnings) + list(st.get("warnings", []))
    if res["crashed"]:
        warnings.append(f"agents exited early: {res['crashed']}")
    summary = summarize(st["fabric"]["kind"], rows, prepared, rate, mtu, m.drops, res["crashed"], warnings)
    if live:
        from testbed.repetition.live import serving_summary

        summary |= serving_summary(res, live, all_rows, messages, run_dir, mtu, rate, st["fabric"]["kind"])
        warnings += res["warnings"]
    summary["agents_ready_s"] = res["agents_ready_s"]
    summary["agents_cpu_s"] = res["agents_cpu_s"]  # all agents' CPU seconds, start to stop
    if prepared.operating_point is not None:
        summary |= write_operating_point(run_dir, prepared.operating_point)
    summary |= write_breakdowns(run_dir, all_rows, m.sampler, rate, mtu)
    summary["cross_traffic"] = m.cross_result
    if m.faults is not None:
        summary["faults"] = [{k: ev[k] for k in ("trace_s", "target", "action", "late_ms", "wall_s")}
                             for ev in m.faults]
        summary["fault_errors"] = m.fault_errors or []
    summary["pfc"] = write_pfc_outputs(run_dir, st, m.pfc_state, rows, res["t0"], m.t_end, m.fabric_drops)
    summary["invariants"] = check_invariants(run_dir, st, m.sampler, all_rows, summary["pfc"]["enabled"], m.faults)
    _warn_on_checks(summary, m.fabric_drops)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    (run_dir / "config.json").write_text(json.dumps({"fabric": st["fabric"], "datapath": st["config"],
                                                     "pfc": st.get("pfc"), "replay": asdict(cfg)}, indent=1))
    link_traffic.write_run(run_dir, fabricctl.fabric_of_state(st), all_rows, cfg.gpus_per_server)  # after links.csv


FAULT_LATE_MS = 50.0  # a fault action later than this (wall) is named in the warnings


def _warn_on_checks(summary: dict, fabric_drops: int) -> None:
    """The summary's loud warnings: lossless PFC broken, a measurement invariant violated, lost bytes
    the drop counters missed, a replay that fell behind its schedule."""
    if summary["pfc"]["enabled"] and not summary["pfc"]["lossless_ok"]:
        summary["warnings"].insert(0, f"LOSSLESS INVARIANT VIOLATED: PFC was on and fabric queues dropped "
                                      f"{fabric_drops} packets")
    summary["warnings"] += [f"MEASUREMENT INVARIANT VIOLATED: {v}" for v in summary["invariants"]["violations"]]
    lost = summary["invariants"]["margins"]["uncounted_loss_bytes"]
    if lost:
        summary["warnings"].append(f"the switches lost {lost} B more than one frame per counted drop: Open vSwitch "
                                   "frees the rest of a send batch when a queue drops, so queue_drops undercounts")
    summary["warnings"] += [f"FAULT NOT APPLIED: {e}" for e in summary.get("fault_errors") or []]
    for ev in summary.get("faults") or []:
        if (ev.get("late_ms") or 0) > FAULT_LATE_MS:
            summary["warnings"].append(f"fault {ev['action']} {ev['target']} came {ev['late_ms']:.0f} ms of wall "
                                       f"time after its run time {ev['trace_s']:g} s")
    cut = summary["invariants"]["margins"].get("lost_at_cut_bytes")
    if cut:
        summary["warnings"].append(f"{cut} B were lost at cables a fault cut (the queue in front of a port that "
                                   "loses carrier is flushed uncounted); those switches' conservation is not checked")
    summary["pfc_pauses"] = summary["pfc"]["pauses"]
    lat = summary["start_lateness_ms"]["p99"]
    if lat is not None and lat > 5:
        summary["warnings"].append(f"start lateness P99 {lat:.1f} ms is over 5 ms: the replay fell behind the trace")
