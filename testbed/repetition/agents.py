"""The traffic agents a replay forks: one per GPU, in its namespace, listening on both NIC ports.

Both drivers start the same agents; they differ only in where the orders come from: a
plan file read before the clock starts (``plan_orders``) or the serving coordinator's
control socket (``control_orders``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from testbed.emulation.datapath import netns_of
from testbed.fabric import addressing
from traffic.runtime.launcher import AGENT_NICE, AGENT_PORT, AgentSpec


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
