"""The traffic agents: one per GPU, in its namespace, listening on both NIC ports.

Both drivers start the same agents; they differ only in where the orders come from: a
plan file read before the clock starts (``plan_orders``, ``run_plan``) or the serving
coordinator's control socket (``control_orders``, ``testbed.backends.emulated.serving``).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from common.errors import EnvironmentProblem
from common.paths import REPO, module_env
from fabrics import addressing
from fabrics.datapath import netns_of
from traffic.runtime.launcher import AGENT_NICE, AGENT_PORT, START_MARGIN_S, AgentSpec

AGENTS_READY_TIMEOUT_S = 60.0  # every agent listening (or connected); forked agents take ~2 s for 64 here


@dataclass
class AgentsRun:
    """What the agents left after a run: where their records are, and how they fared."""

    t0: float  # CLOCK_MONOTONIC of run time 0; the records' times are on this clock
    agents_dir: Path  # <name>.plan.jsonl, .sent.jsonl, .recv.jsonl (traffic.runtime.records.merge_results)
    crashed: dict[str, int]  # agent -> exit status, for agents that exited early or badly
    ready_s: float  # from the fork to every agent ready
    cpu_s: float  # all agents' CPU seconds, start to stop


def plan_orders(plans: dict) -> Callable[[str], list[str]]:
    """Each agent sends its plan file, its clock started by the t0 the launcher hands out."""
    return lambda name: ["--plan", str(plans[name]), "--t0-stdin"]


def control_orders(sock: Path) -> Callable[[str], list[str]]:
    """Each agent takes send orders from the coordinator's Unix socket."""
    return lambda name: ["--control", str(sock)]


def agent_specs(gpus, orders: Callable[[str], list[str]], agents_dir: Path, timeout_s: float,
                connections: str) -> list[AgentSpec]:
    """What the launcher forks for ``gpus``."""
    specs = []
    for g in gpus:
        name = f"gpu{g}"
        argv = ["--name", name, *orders(name), "--out", str(agents_dir), "--ready-file",
                str(agents_dir / f"{name}.ready"), "--transfer-timeout", str(timeout_s), "--connections", connections]
        for p in (1, 2):
            argv += ["--listen", f"{addressing.ip_of(g, p)}:{AGENT_PORT}"]
        specs.append(AgentSpec(name, netns_of(g), argv, str(agents_dir / f"{name}.stderr"), AGENT_NICE))
    return specs


def _count_lines(paths: list[Path]) -> int:
    total = 0
    for p in paths:
        try:
            with open(p, "rb") as fh:
                total += fh.read().count(b"\n")
        except FileNotFoundError:
            pass
    return total


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


def run_plan(gpus: list[int], rows: list[dict], agents_dir: Path, timeout_s: float, connections: str, log=print,
             ready_timeout_s: float = AGENTS_READY_TIMEOUT_S, on_t0=None) -> AgentsRun:
    """Start one agent per GPU on its plan (``rows`` split by sender), hand out the common t0 once all
    listen, wait for the plan, stop them. ``on_t0``: called with t0 once it is handed out (the fault
    schedule starts its clock there)."""
    from traffic.runtime import records
    from traffic.runtime.launcher import Fleet

    names = [f"gpu{g}" for g in gpus]
    plans = records.write_plans(rows, agents_dir, agents=names)
    specs = agent_specs(gpus, plan_orders(plans), agents_dir, timeout_s, connections)
    fleet = Fleet(specs, agents_dir / "launcher.json", cwd=REPO, env=module_env())
    crashed: dict[str, int] = {}
    try:
        ready_s = _wait_ready(fleet, names, agents_dir, ready_timeout_s)
        log(f"{len(names)} agents listening after {ready_s:.2f} s")
        t0 = time.monotonic() + START_MARGIN_S
        fleet.go(t0)
        if on_t0 is not None:
            on_t0(t0)
        last_start = max(r["start"] for r in rows)
        deadline = t0 + last_start + timeout_s + 5
        sent_files = [agents_dir / f"{n}.sent.jsonl" for n in names]
        total = len(rows)
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

