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
from testbed.repetition.replay import AgentsRun

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
    """The coordinator's config from a RepetitionConfig: pure computation, no fabric needed."""
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


@dataclass
class LiveRun(AgentsRun):
    """What a live run left: the agents' records and the coordinator's results and complaints."""

    serving: dict  # the coordinator's "done" results (traffic.runtime.coordinator.Coordinator.results)
    warnings: list[str]  # the coordinator's warning and error events


def run_live(st, setup: LiveSetup, run_dir: Path, timeout_s: float, connections: str, log=print,
             on_t0=None) -> LiveRun:
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
    return LiveRun(started["t0"], agents_dir, crashed, round(ready_s, 3), round(sum(fleet.cpu_s.values()), 3),
                   done["results"], [e["message"] for e in coord.events if e.get("event") in ("warning", "error")])


def _tail(path: Path) -> str:
    try:
        return " ".join(path.read_text(errors="replace").strip().splitlines()[-2:])
    except OSError:
        return ""
