"""The serving cluster on the emulated fabric.

On one host (``run_hosted``, the default): one process (``traffic.runtime.host``) runs the cluster and every
GPU's agent in one loop, each agent's sockets in its GPU's namespace, so an order and an arrival are calls.
``run_serving``: the coordinator process (``traffic.runtime.coordinator``) with one agent process per GPU
in control mode, each order and arrival a line over a Unix socket; several hosts need it (their agents
reach the coordinator through a relay), and ``bench control-path`` sets it against the hosted one."""

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
from pathlib import Path

from common.errors import EnvironmentProblem, TestbedError
from common.paths import REPO, module_env
from fabrics import addressing
from fabrics.datapath import netns_of
from testbed.backends.base import ServingOutcome, ServingTraffic
from testbed.backends.emulated.agents import AGENTS_READY_TIMEOUT_S, AgentsRun, agent_specs, control_orders
from traffic.runtime.launcher import AGENT_PORT, Fleet

DRAIN_TIMEOUT_S = 30.0  # after the end, for messages in flight

def _die_with_parent() -> None:
    """The coordinator dies with the replay, as the agents do (``traffic.runtime.launcher``)."""
    from traffic.runtime.launcher import die_with_parent

    die_with_parent(signal.SIGKILL)


class _Coordinator:
    """The coordinator process (or the host process: ``module``) and its event stream."""

    def __init__(self, config_path: Path, log_path: Path, module: str = "traffic.runtime.coordinator") -> None:
        self.events: list[dict] = []
        self.started = threading.Event()
        self.ended = threading.Event()
        self.proc = subprocess.Popen([sys.executable, "-m", module, str(config_path)], cwd=REPO,
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


def start_coordinator(traffic: ServingTraffic, run_dir: Path, names: list[str]) -> tuple[_Coordinator, Path]:
    """The coordinator for agents ``names``, listening on a Unix socket in a fresh directory (returned; the
    caller removes it); EnvironmentProblem when it does not come up."""
    agents_dir = run_dir / "agents"
    agents_dir.mkdir(parents=True, exist_ok=True)
    sock_dir = Path(tempfile.mkdtemp(prefix="tb-serving-"))  # a Unix socket path must stay under 108 bytes
    sock = sock_dir / "control.sock"
    config = dict(traffic.config, socket=str(sock), agents_dir=str(agents_dir), run_dir=str(run_dir), port=AGENT_PORT,
                  agents=names, ready_timeout_s=AGENTS_READY_TIMEOUT_S, drain_timeout_s=DRAIN_TIMEOUT_S)
    (run_dir / "serving_config.json").write_text(json.dumps(config))
    coord = _Coordinator(run_dir / "serving_config.json", run_dir / "coordinator.log")
    deadline = time.monotonic() + 20
    while not sock.exists():
        if coord.proc.poll() is not None or time.monotonic() > deadline:
            coord.stop()
            shutil.rmtree(sock_dir, ignore_errors=True)
            said = coord.event("error") or {}
            raise EnvironmentProblem(f"the coordinator did not start: {said.get('message', '')} "
                                     f"{_tail(run_dir / 'coordinator.log')}")
        time.sleep(0.02)
    return coord, sock


def _wait(event: threading.Event, seconds: float, check) -> bool:
    """``event`` within ``seconds``, calling ``check`` (which raises when something it watches is lost)
    twice a second."""
    deadline = time.monotonic() + seconds
    while not event.wait(min(0.5, max(0.0, deadline - time.monotonic()))):
        if time.monotonic() >= deadline:
            return False
        check()
    return True


def wait_started(coord: _Coordinator, run_dir: Path, check=lambda: None) -> None:
    """Until every agent said hello and the coordinator started the clock."""
    if not _wait(coord.started, AGENTS_READY_TIMEOUT_S + 5, check):
        raise EnvironmentProblem(f"the agents never all reached the coordinator: {_tail(run_dir / 'coordinator.log')}"
                                 f" {coord.events[-1:]}")


def wait_ended(coord: _Coordinator, traffic: ServingTraffic, check=lambda: None) -> None:
    """Until the coordinator finished serving and draining."""
    if not _wait(coord.ended, traffic.duration_s * traffic.dilation + DRAIN_TIMEOUT_S + 30, check):
        raise EnvironmentProblem("the coordinator did not finish in time")
    time.sleep(0.5)  # receivers log the last bytes


def outcome(coord: _Coordinator, run_dir: Path) -> ServingOutcome:
    """The coordinator's results and its warnings; EnvironmentProblem when it ended without results."""
    done = coord.event("done")
    if done is None:
        err = coord.event("error") or {"message": f"it exited ({coord.proc.returncode}) without results: "
                                                  f"{_tail(run_dir / 'coordinator.log')}"}
        raise EnvironmentProblem(f"the coordinator failed: {err['message']}")
    return ServingOutcome(done["results"], tuple(e["message"] for e in coord.events
                                                 if e.get("event") in ("warning", "error")))


def serving_log_line(n_agents: int, ready_s: float, traffic: ServingTraffic, where: str = "") -> str:
    wall = traffic.duration_s * traffic.dilation
    return (f"{n_agents} agents{where} connected after {ready_s:.2f} s; serving for {traffic.duration_s:g} s of "
            f"cluster time ({wall:.0f} s of wall time at dilation {traffic.dilation:g})")


def run_serving(gpus: list[int], traffic: ServingTraffic, run_dir: Path, timeout_s: float, connections: str,
                log=print, on_t0=None) -> tuple[AgentsRun, ServingOutcome]:
    """Start the coordinator and one agent per GPU (control mode), wait for the run, stop them. ``on_t0``:
    called with the run's t0 once the coordinator started the clock."""
    agents_dir = run_dir / "agents"
    coord, sock = start_coordinator(traffic, run_dir, [f"gpu{g}" for g in gpus])
    fleet = None
    try:
        specs = agent_specs(gpus, control_orders(sock), agents_dir, timeout_s, connections)
        t_ready = time.monotonic()
        fleet = Fleet(specs, agents_dir / "launcher.json", cwd=REPO, env=module_env())
        wait_started(coord, run_dir)
        ready_s = time.monotonic() - t_ready
        if on_t0 is not None:
            on_t0((coord.event("started") or {})["t0"])
        log(serving_log_line(len(gpus), ready_s, traffic))
        wait_ended(coord, traffic)
    finally:
        exits = fleet.stop() if fleet is not None else {}
        coord.stop()
        shutil.rmtree(sock.parent, ignore_errors=True)
    result = outcome(coord, run_dir)
    crashed = {n: rc for n, rc in exits.items() if rc != 0}
    started = coord.event("started")
    run = AgentsRun(started["t0"], agents_dir, crashed, round(ready_s, 3), round(sum(fleet.cpu_s.values()), 3))
    return run, result


def run_hosted(gpus: list[int], traffic: ServingTraffic, run_dir: Path, timeout_s: float, connections: str,
               log=print, on_t0=None, port_seed: int | None = None) -> tuple[AgentsRun, ServingOutcome]:
    """The cluster and every GPU's agent in one process (``traffic.runtime.host``); ``run_serving``'s
    contract. The agents' CPU is the host process's (the cluster's included). ``port_seed``: the persistent
    connections' source ports are drawn from it (the results list them under ``connections``)."""
    agents_dir = run_dir / "agents"
    agents_dir.mkdir(parents=True, exist_ok=True)
    names = [f"gpu{g}" for g in gpus]
    hosted = [{"name": f"gpu{g}", "netns": netns_of(g),
               "listen": [f"{addressing.ip_of(g, p)}:{AGENT_PORT}" for p in (1, 2)]} for g in gpus]
    from testbed.emulation.cpus import lateness_cpus

    config = {"scheduling": "fifo", **traffic.config, "agents_dir": str(agents_dir), "run_dir": str(run_dir),
              "port": AGENT_PORT, "agents": names, "hosted": hosted, "transfer_timeout_s": timeout_s,
              "connections": connections, "drain_timeout_s": DRAIN_TIMEOUT_S, "cpus": lateness_cpus(),
              "port_seed": port_seed}
    (run_dir / "serving_config.json").write_text(json.dumps(config))
    t_ready = time.monotonic()
    coord = _Coordinator(run_dir / "serving_config.json", run_dir / "coordinator.log", "traffic.runtime.host")
    try:
        _wait(coord.started, AGENTS_READY_TIMEOUT_S + 5, _alive(coord, run_dir))
        said = coord.event("error")
        if said is not None and coord.event("started") is None:  # the cluster's config: the experiment's fault
            raise TestbedError(f"the serving process refused the run: {said['message']}")
        wait_started(coord, run_dir, _alive(coord, run_dir))
        ready_s = time.monotonic() - t_ready
        if on_t0 is not None:
            on_t0((coord.event("started") or {})["t0"])
        log(serving_log_line(len(gpus), ready_s, traffic, " (one process)"))
        wait_ended(coord, traffic, _alive(coord, run_dir))
    finally:
        coord.stop()
    result = outcome(coord, run_dir)
    rc = coord.proc.returncode
    cpu = result.results.get("cpu_s")
    run = AgentsRun(coord.event("started")["t0"], agents_dir, {"host": rc} if rc else {}, round(ready_s, 3),
                    round(cpu, 3) if cpu is not None else 0.0)
    return run, result


def _alive(coord: _Coordinator, run_dir: Path):
    def check() -> None:
        if coord.ended.is_set() and coord.event("started") is None:
            coord.started.set()  # it ended before it started: the caller reads why
        elif coord.proc.poll() is not None and not coord.ended.is_set():
            raise EnvironmentProblem(f"the serving process exited ({coord.proc.returncode}): "
                                     f"{_tail(run_dir / 'coordinator.log')}")
    return check


def _tail(path: Path) -> str:
    try:
        return " ".join(path.read_text(errors="replace").strip().splitlines()[-2:])
    except OSError:
        return ""

