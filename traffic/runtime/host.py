"""The serving coordinator and every GPU's agent in one process, one event loop.

``traffic.runtime.coordinator`` with one agent process per GPU moves each order over a Unix socket (JSON
line, the agent's wake-up, its loop's turns) and each arrival back the same way; a combine phase, which
starts when the dispatch's last message arrived, waits for both trips. On the 2-core machine (one core
mostly OVS's PMD and the fabric's softirqs) 33 processes queued for the other core: an order waited
~5 ms at the median and ~18 ms at the P99 before its agent acted on it (docs/replay.md, "Where a default
run's time goes").

Here the agents are ``traffic.runtime.agent.Agent`` objects in this process: each GPU's sockets are
made in its namespace (setns, create, come back; a socket stays where it was made) and served by this
process's loop. An order is a call (``Agent.order``: the frame goes out in that call when its connection
is idle), an arrival is a call (``Coordinator.on_report``), and a timer that ends a step sends the step's
messages from the same loop. Each agent still writes its own sent and received records, and every
order its plan line, so the merge and the write-up are unchanged.

Usage: ``python -m traffic.runtime.host CONFIG.json``: the coordinator's config plus ``hosted``, one
``{"name", "netns", "listen": ["ip:port", ...]}`` per agent (``netns`` null: this namespace), and the
senders' ``transfer_timeout_s``, ``connections``, ``dead_after_s``, ``dead_hold_s``, and ``scheduling``
(``fifo``, the default, or ``nice``: ``set_scheduling``) on ``cpus`` (a list, or null), and ``port_seed``: the
persistent connections' source ports are drawn from it (``traffic.runtime.ports``: the repetition's ECMP outcome
on ROFT; null: the kernel's), listed in the results' ``connections``. Events on stdout
as the coordinator's: ``ready``, ``started`` (t0), ``done`` (with the results) or ``error``. Root is
needed only to enter the namespaces.
"""

from __future__ import annotations

import asyncio
import gc
import json
import resource
import sys

from traffic.model import serving
from traffic.model.errors import TrafficError
from traffic.runtime.agent import DEFAULT_DEAD_HOLD_S, DEFAULT_TRANSFER_TIMEOUT_S, Agent
from traffic.runtime.coordinator import Coordinator, emit, serve_main
from traffic.runtime.orders import AgentError, PlannedTransfer, parse_listen
from traffic.runtime.sender import DEFAULT_DEAD_AFTER_S

RECORD_BUFFER_BYTES = 1 << 16  # records are flushed at the end (one process: a crash loses the run anyway)
# The one process that decides lateness runs SCHED_FIFO below the pause daemon (10): it wakes at once next to
# OVS's PMD and whatever else runs, and it sleeps between events (no spin), so it takes no core from them.
FIFO_PRIORITY = 5
SCHEDULING = ("fifo", "nice")


def set_scheduling(kind: str, cpus: list[int] | None = None) -> str:
    """``fifo`` (SCHED_FIFO at FIFO_PRIORITY; nice -10 when refused) or ``nice`` (nice -10), on ``cpus`` if
    given (the CPUs OVS's PMD is not pinned to: ``testbed.emulation.cpus``): what it got."""
    import os

    where = ""
    if cpus:
        try:
            os.sched_setaffinity(0, cpus)
            where = f" on CPU {','.join(map(str, cpus))}"
        except OSError:
            pass
    return _priority(kind) + where


def _priority(kind: str) -> str:
    import os

    if kind == "fifo":
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(FIFO_PRIORITY))
            return f"fifo {FIFO_PRIORITY}"
        except (OSError, AttributeError):
            pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)
        return "nice -10"
    except OSError:
        return "nice 0"


class HostCoordinator(Coordinator):
    """The coordinator whose agents live in its own loop."""

    def __init__(self, cfg: dict) -> None:
        super().__init__(cfg)
        self.hosted: dict[str, Agent] = {}
        self.kept: dict[str, list[dict]] = {}  # each sender's plan lines, written when the run is over
        self.scheduling = "nice 0"

    def make_agents(self) -> None:
        out = self.cfg["agents_dir"]
        for a in self.cfg["hosted"]:
            try:
                listen = [parse_listen(x) for x in a["listen"]]
            except Exception as exc:  # noqa: BLE001 - argparse's ArgumentTypeError
                raise TrafficError(f"agent {a['name']}: {exc}") from None
            self.hosted[a["name"]] = Agent(
                a["name"], listen, [], out, 0.0,
                transfer_timeout=float(self.cfg.get("transfer_timeout_s", DEFAULT_TRANSFER_TIMEOUT_S)),
                connections=self.cfg.get("connections", "persistent"),
                dead_after=float(self.cfg.get("dead_after_s", DEFAULT_DEAD_AFTER_S)),
                dead_hold=float(self.cfg.get("dead_hold_s", DEFAULT_DEAD_HOLD_S)),
                netns=a.get("netns"), on_report=self.on_report, record_buffering=RECORD_BUFFER_BYTES,
                port_seed=self.cfg.get("port_seed"))
        missing = sorted(set(self.agents) - set(self.hosted))
        if missing:
            raise TrafficError(f"no hosted agent for {', '.join(missing[:8])}")

    def plan_line(self, name: str, order: dict) -> None:
        self.kept.setdefault(name, []).append(order)

    def apply(self, actions: list, now: float) -> None:
        """As the coordinator's, but every message of the turn goes on the wire first; the plan lines, the
        ack-waiting tasks and the timers after."""
        loop = asyncio.get_running_loop()
        due = self.t0 + now * self.dilation
        sent = []
        for a in actions:
            if not isinstance(a, serving.Timer):
                m = a.message
                sp, dp = self._ports(m.src_gpu, m.dst_gpu)
                self.count_order(m, sp)
                agent = self.hosted[f"gpu{m.src_gpu}"]
                src, dst = self.ips[m.src_gpu], self.ips[m.dst_gpu]
                t = PlannedTransfer(m.id, m.request_id, agent.name, f"gpu{m.dst_gpu}", src[sp - 1], dst[dp - 1],
                                    self.port, m.bytes, due, src[2 - sp], dst[2 - dp])
                sent.append((agent, m, agent.put_on_wire(t)))
        for agent, m, handle in sent:
            self.log_order(m, handle[0])
            agent.follow(handle)
        for a in actions:
            if isinstance(a, serving.Timer):
                loop.call_at(self.t0 + a.at * self.dilation, self.fire, a.key, a.at)

    async def run(self) -> dict:
        self.make_agents()
        try:
            for agent in self.hosted.values():
                try:
                    await agent.bind()
                except AgentError as exc:
                    raise TrafficError(f"{agent.name}: {exc}") from None
            self.open_plans(buffering=RECORD_BUFFER_BYTES)
            self.scheduling = set_scheduling(self.cfg.get("scheduling", "fifo"), self.cfg.get("cpus"))
            emit("ready", agents=len(self.hosted), scheduling=self.scheduling)
            gc.collect()
            gc.freeze()  # what exists now (the cluster, the workload) is never scanned again
            gc.disable()  # no collector pause in the middle of a burst; cycles are rare here, collected at the end
            try:
                await self.serve()
            finally:
                gc.enable()
            self.ended = True
            deadline = float(self.cfg.get("transfer_timeout_s", DEFAULT_TRANSFER_TIMEOUT_S))
            for agent in self.hosted.values():  # everything arrived; let the senders read their acks
                await agent.settle(deadline)
        finally:
            for agent in self.hosted.values():
                await agent.shutdown(asyncio.create_task(asyncio.sleep(0)))
            for name, fh in self.plans.items():
                fh.write("".join(json.dumps(o, separators=(",", ":")) + "\n" for o in self.kept.get(name, ())))
                fh.close()
        return self.results() | {"scheduling": self.scheduling, "port_seed": self.cfg.get("port_seed"),
                                 "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                                 "connections": [list(c) for a in self.hosted.values() for c in a.opened]}


def main(argv: list[str] | None = None) -> int:
    return serve_main("traffic.runtime.host", HostCoordinator, argv)


if __name__ == "__main__":
    sys.exit(main())
