"""The live driver: serving with the network in the loop (``serving.driver: live``).

Where the planned replay computes every transfer's time before the run, here
``traffic.runtime.coordinator`` runs the serving cluster (``traffic.model.serving``) while the
agents move its KV transfers and expert-parallel messages over the fabric:
steps wait for their slowest message, so TTFT and output tokens/s move when
the fabric is slow. This module turns the replay's settings into the
coordinator's config, starts it and the agents, and waits for the run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from testbed import scale
from testbed.errors import EnvironmentProblem, TestbedError
from testbed.fabric import addressing
from testbed.fabric.routing import select_ports
from testbed.paths import REPO, module_env

READY_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 30.0  # after the end, for messages in flight


@dataclass
class LiveSetup:
    """What ``prepare_live`` computed: the coordinator's config and a few figures for the summary."""

    config: dict
    requests: int
    bytes_scale: float
    engines: dict
    layout: dict | None = None  # {"name", "prefill": {"engines", "gpus", "form"}, "decode": ...}


def prepare_live(cfg, n_gpus: int, rate_bps: float) -> LiveSetup:
    """The coordinator's config from a ReplayConfig: pure computation, no fabric needed."""
    from traffic.model import models, placement, serving, traces

    read = traces.read_trace(cfg.trace, cfg.trace_format, skip_bad=cfg.skip_bad)
    end = cfg.start_s + cfg.duration_s
    if cfg.arrivals == "closed":  # the trace only supplies request sizes, in order, from the window's start
        reqs = [r for r in read.requests if r.arrival_s >= cfg.start_s][: cfg.first_n or None]
    else:
        reqs = traces.slice_requests(read.requests, start_s=cfg.start_s, end_s=end, first_n=cfg.first_n,
                                     speed=cfg.speed)
    if not reqs:
        raise TestbedError(f"the trace window from {cfg.start_s:g} s of {cfg.trace} holds no request")
    model = models.get_model(cfg.model)
    moe = model.expert is not None
    p_tp, d_tp = (1, 1) if moe else (cfg.prefill_tp, cfg.decode_tp)
    if cfg.layout is not None:  # a named deployment (docs/serving.md, "Layouts")
        built = placement.layout_engines(cfg.layout, n_gpus, cfg.gpus_per_server, cfg.prefill_fraction)
        prefill, decode = built["prefill"], built["decode"]
    else:
        place = placement.place(n_gpus, p_tp, d_tp, cfg.prefill_fraction, gpus_per_server=cfg.gpus_per_server)
        n_pre = sum(len(i.gpus) for i in place.prefill)
        n_dec = sum(len(i.gpus) for i in place.decode)
        prefill = serving.build_engines("prefill", place.prefill, (cfg.prefill_ep or n_pre) if moe else None)
        decode = serving.build_engines("decode", place.decode, (cfg.decode_ep or n_dec) if moe else None)
    dilation = cfg.time_dilation
    b_scale = scale.bytes_scale(rate_bps, cfg.represents_bps) / dilation
    duration = cfg.duration_s if cfg.arrivals == "closed" else cfg.duration_s / cfg.speed
    spec = dict(model=model.name, dtype=cfg.dtype, gpus_per_server=cfg.gpus_per_server, bytes_scale=b_scale,
                chunk_bytes=cfg.chunk_bytes, prefill_chunk_tokens=cfg.prefill_chunk_tokens,
                decode_batch=cfg.decode_batch, decode_step_s=cfg.decode_step_s, popularity=cfg.popularity,
                zipf_s=cfg.zipf_s, seed=cfg.seed, arrivals=cfg.arrivals, concurrency=cfg.concurrency,
                duration_s=duration, warmup_s=cfg.warmup_s,
                prefill=[[list(u.gpus) for u in e] for e in prefill],
                decode=[[list(u.gpus) for u in e] for e in decode])
    serving.ServingSpec(model=model, prefill=prefill, decode=decode,
                        **{k: v for k, v in spec.items() if k not in ("model", "prefill", "decode")})  # validates
    gpus = range(1, n_gpus + 1)
    choices = {f"{a},{b}": [[c.src_port, c.dst_port] for c in select_ports(a, b, _static(cfg.policy))]
               for a in gpus for b in gpus if a != b}
    config = {"spec": spec, "requests": [[r.request_id, r.arrival_s, r.input_tokens, r.output_tokens] for r in reqs],
              "dilation": dilation, "agents": [f"gpu{g}" for g in gpus],
              "ips": {str(g): [addressing.ip_of(g, 1), addressing.ip_of(g, 2)] for g in gpus},
              "choices": choices, "policy": cfg.policy, "ready_timeout_s": READY_TIMEOUT_S,
              "drain_timeout_s": DRAIN_TIMEOUT_S}
    engines = {"prefill": [[g for u in e for g in u.gpus] for e in prefill],
               "decode": [[g for u in e for g in u.gpus] for e in decode]}
    return LiveSetup(config, len(reqs), b_scale, engines, serving.layout_summary(cfg.layout, prefill, decode))


def _static(policy: str) -> str:
    """The per-pair choices a policy alternates over; ``adaptive`` chooses among striped's by backlog."""
    return "striped" if policy == "adaptive" else policy


def _die_with_parent() -> None:
    """The coordinator dies with the replay, as the agents do (``traffic.runtime.launcher``)."""
    from traffic.runtime.launcher import die_with_parent

    die_with_parent(signal.SIGKILL)


class _Coordinator:
    """The coordinator process and its event stream."""

    def __init__(self, config_path: Path, log_path: Path) -> None:
        self.events: list[dict] = []
        self.started = threading.Event()
        self.ended = threading.Event()
        self.proc = subprocess.Popen([sys.executable, "-m", "traffic.runtime.coordinator", str(config_path)], cwd=REPO,
                                     env=module_env(), stdout=subprocess.PIPE,
                                     stderr=open(log_path, "w"), text=True, preexec_fn=_die_with_parent)
        os.setpriority(os.PRIO_PROCESS, self.proc.pid, -10)
        threading.Thread(target=self._read, daemon=True, name="coordinator-events").start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                continue
            self.events.append(ev)
            if ev.get("event") == "started":
                self.started.set()
            if ev.get("event") in ("done", "error"):
                self.ended.set()
        self.ended.set()

    def event(self, name: str) -> dict | None:
        return next((e for e in self.events if e.get("event") == name), None)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_live(st: dict, setup: LiveSetup, run_dir: Path, timeout_s: float, connections: str, log=print,
             on_t0=None) -> dict:
    """Start the coordinator and one agent per GPU (control mode), wait for the run, stop them. ``on_t0``:
    called with the run's t0 once the coordinator started the clock."""
    from testbed.emulation import fabricctl
    from testbed.repetition import agents
    from traffic.runtime.launcher import AGENT_PORT, Fleet

    agents_dir = run_dir / "agents"
    agents_dir.mkdir(parents=True, exist_ok=True)
    sock_dir = Path(tempfile.mkdtemp(prefix="tb-serving-"))  # a Unix socket path must stay under 108 bytes
    sock = sock_dir / "control.sock"
    config = dict(setup.config, socket=str(sock), agents_dir=str(agents_dir), run_dir=str(run_dir), port=AGENT_PORT)
    gpus = list(fabricctl.fabric_of_state(st).gpus())
    config["agents"] = [f"gpu{g}" for g in gpus]
    (run_dir / "serving_config.json").write_text(json.dumps(config))
    coord = _Coordinator(run_dir / "serving_config.json", run_dir / "coordinator.log")
    fleet = None
    try:
        deadline = time.monotonic() + 20
        while not sock.exists():
            if coord.proc.poll() is not None or time.monotonic() > deadline:
                said = coord.event("error") or {}
                raise EnvironmentProblem(f"the coordinator did not start: {said.get('message', '')} "
                                         f"{_tail(run_dir / 'coordinator.log')}")
            time.sleep(0.02)
        specs = agents.agent_specs(gpus, agents.control_orders(sock), agents_dir, timeout_s, connections)
        t_ready = time.monotonic()
        fleet = Fleet(specs, agents_dir / "launcher.json", cwd=REPO, env=module_env())
        if not coord.started.wait(READY_TIMEOUT_S + 5):
            log_tail = _tail(run_dir / "coordinator.log")
            raise EnvironmentProblem(f"the agents never all reached the coordinator: {log_tail}"
                                     f" {coord.events[-1:]}")
        ready_s = time.monotonic() - t_ready
        if on_t0 is not None:
            on_t0((coord.event("started") or {})["t0"])
        spec = setup.config["spec"]
        wall = spec["duration_s"] * setup.config["dilation"]
        log(f"{len(gpus)} agents connected after {ready_s:.2f} s; serving for {spec['duration_s']:g} s of cluster "
            f"time ({wall:.0f} s of wall time at dilation {setup.config['dilation']:g})")
        if not coord.ended.wait(wall + DRAIN_TIMEOUT_S + 30):
            raise EnvironmentProblem("the coordinator did not finish in time")
        time.sleep(0.5)  # receivers log the last bytes
    finally:
        exits = fleet.stop() if fleet is not None else {}
        coord.stop()
        shutil.rmtree(sock_dir, ignore_errors=True)
    done = coord.event("done")
    if done is None:
        err = coord.event("error") or {"message": f"it exited ({coord.proc.returncode}) without results: "
                                                  f"{_tail(run_dir / 'coordinator.log')}"}
        raise EnvironmentProblem(f"the coordinator failed: {err['message']}")
    crashed = {n: rc for n, rc in exits.items() if rc != 0}
    started = coord.event("started")
    return {"t0": started["t0"], "crashed": crashed, "agents_dir": agents_dir, "agents_ready_s": round(ready_s, 3),
            "agents_cpu_s": round(sum(fleet.cpu_s.values()), 3), "serving": done["results"],
            "warnings": [e["message"] for e in coord.events if e.get("event") in ("warning", "error")]}


def _message_ports(messages: list[dict]) -> dict[int, tuple[str, str]]:
    """Message id -> ("gpu3:p1", "gpu17:p2"): the NIC ports it went between (the pair last used)."""
    from traffic.runtime.records import sent_pair

    out = {}
    for m in messages:
        ends = [addressing.parse_ip(a) if a else None for a in sent_pair(m)]
        if m.get("id") is not None and all(ends):
            out[int(m["id"])] = tuple(f"gpu{g}:p{p}" for g, p in ends)
    return out


def _tail(path: Path) -> str:
    try:
        return " ".join(path.read_text(errors="replace").strip().splitlines()[-2:])
    except OSError:
        return ""


HEADER_BYTES = 66 + 24  # per packet (Ethernet, IPv4, TCP with timestamps) + the agent's frame header
LINKS_ON_PATH = {"zcube": 3, "roft": 4}  # NIC-switch-switch-NIC; NIC-leaf-spine-leaf-NIC (cross-rail)


def exchange_ideal_s(messages: list[dict], rate_bps: float, mtu: int, links: int, ports: int = 2) -> float:
    """An exchange's ideal span on an otherwise idle fabric: the busiest GPU's bytes (sent or received,
    headers included) at ``ports`` x the link rate, plus the last packet's store-and-forward over the
    other ``links - 1`` links of its path. ``messages``: dicts with src, dst and bytes."""
    payload = max(1, mtu - 52)
    load: dict[tuple[str, str], int] = {}
    for m in messages:
        wire = m["bytes"] + HEADER_BYTES * -(-m["bytes"] // payload)
        for end in (("tx", m["src"]), ("rx", m["dst"])):
            load[end] = load.get(end, 0) + wire
    last_packet = min(max(m["bytes"] for m in messages), payload) + HEADER_BYTES
    return max(load.values()) * 8 / (ports * rate_bps) + (links - 1) * last_packet * 8 / rate_bps


def exchange_vs_ideal(messages: list[dict], rate_bps: float, mtu: int, links: int, ports: int = 2) -> list[float]:
    """Per exchange phase (engine, step, dispatch or combine) of the verified messages: its measured
    span (first order to last byte) over its ideal (``exchange_ideal_s``)."""
    phases: dict[tuple, list[dict]] = {}
    for m in messages:
        if m["verified"] and m.get("step") is not None:
            phases.setdefault((m.get("engine"), m["step"], m.get("kind")), []).append(m)
    return [(max(m["end"] for m in ms) - min(m["start"] for m in ms)) / exchange_ideal_s(ms, rate_bps, mtu, links,
                                                                                          ports)
            for ms in phases.values()]


def serving_summary(res: dict, setup: LiveSetup, rows: list[dict], messages: list[dict], run_dir: Path,
                    mtu: int, rate_bps: float | None = None, fabric: str = "zcube") -> dict:
    """The live run's serving figures for summary.json, in real-cluster time (wall time / dilation)."""
    import csv
    import math

    from traffic.model.breakdown import decode_step_breakdown, ttft_breakdown
    from traffic.model.metrics import percentile, rounded_percentiles
    from traffic.runtime.records import retry_counts

    srv = res["serving"]
    spec = setup.config["spec"]
    dilation = setup.config["dilation"]

    def pct(values: list[float]) -> dict:
        return rounded_percentiles(values, factor=1e3)  # seconds -> ms

    with open(run_dir / "requests.csv", newline="") as fh:
        reqs = list(csv.DictReader(fh))
    lo, end = spec["warmup_s"], spec["duration_s"]
    measured = [r for r in reqs if lo <= float(r["arrival_s"]) < end]
    ttft = [float(r["ttft_s"]) for r in measured if r["ttft_s"] and float(r["first_token_s"]) <= end]
    with open(run_dir / "steps.csv", newline="") as fh:
        steps = list(csv.DictReader(fh))
    exchange = [float(s["exchange_s"]) for s in steps if s["exchange_s"] and int(s["messages"])]
    decode_step = [float(s["end_s"]) - float(s["start_s"]) for s in steps
                   if s["engine"].startswith("decode") and s["end_s"]]
    lateness = [r["start"] - r["scheduled_start"] for r in rows + messages
                if r["start"] is not None and r["scheduled_start"] is not None]
    lateness_real = [x / dilation for x in lateness]
    payload = max(1, mtu - 52)
    packets = [math.ceil(r["bytes"] / payload) for r in rows if r["bytes"]]
    util = srv["utilization"]
    vs_ideal = exchange_vs_ideal(messages, rate_bps, mtu, LINKS_ON_PATH.get(fabric, 4)) if rate_bps else []
    return {
        "driver": "live",
        "closed_loop": spec["arrivals"] == "closed",
        "concurrency": spec["concurrency"] if spec["arrivals"] == "closed" else None,
        "time_dilation": dilation,
        "requests": srv["measured_requests"],
        "requests_completed": srv["completed_requests"],
        "first_token_missing": srv["first_token_missing"],
        "throughput_tokens_per_s": round(srv["throughput_tokens_per_s"], 2),
        "completed_requests_per_s": round(srv["completed_requests"] / (end - lo), 3) if end > lo else None,
        "ttft_ms": pct(ttft),
        "decode_step_ms": pct(decode_step),
        "ep_exchange_ms": pct(exchange),
        "ep_exchange_vs_ideal": rounded_percentiles(vs_ideal),
        "prefill_utilization": srv["prefill_token_utilization"],
        "prefill_busy": {k: v for k, v in util.items() if k.startswith("prefill")},
        "decode_utilization": {k: v for k, v in util.items() if k.startswith("decode")},
        "ep_bytes": srv["ep_bytes"],
        "nvlink_bytes": srv["nvlink_bytes"],
        "kv_bytes": srv["kv_bytes"],
        "ep_messages": len(messages),
        "ep_messages_verified": sum(1 for m in messages if m["verified"]),
        "ep_messages_retried": retry_counts(messages)[0],
        "ep_messages_moved": retry_counts(messages)[1],
        "transfer_packets": {"p50": percentile(packets, 50) if packets else None},
        "start_lateness_ms": pct(lateness_real),
        "start_lateness_wall_ms": pct(lateness),
        "control_lag_ms": srv["control_lag_ms"],
        "coordinator_cpu_s": srv.get("cpu_s"),
        "serving_failed_messages": srv["failed_messages"],
        "engines": setup.engines,
        "serving_layout": setup.layout,
        "ttft_breakdown_ms": ttft_breakdown(reqs, lo, end),
        "decode_step_breakdown_ms": decode_step_breakdown(steps, lo, end, _message_ports(messages)),
        "times_note": "ttft, steps, throughput and start lateness are real-cluster time; fct and "
                      f"start_lateness_wall_ms are emulated wall time (real-cluster x {dilation:g})",
    }
