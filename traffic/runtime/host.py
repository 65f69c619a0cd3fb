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
senders' ``transfer_timeout_s``, ``connections``, ``dead_after_s``, ``dead_hold_s``. Events on stdout
as the coordinator's: ``ready``, ``started`` (t0), ``done`` (with the results) or ``error``. Root is
needed only to enter the namespaces.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from traffic.model import serving
from traffic.model.errors import TrafficError
from traffic.runtime.agent import DEFAULT_DEAD_HOLD_S, DEFAULT_TRANSFER_TIMEOUT_S, Agent
from traffic.runtime.coordinator import Coordinator, emit
from traffic.runtime.orders import AgentError, PlannedTransfer, parse_listen
from traffic.runtime.sender import DEFAULT_DEAD_AFTER_S

RECORD_BUFFER_BYTES = 1 << 16  # records are flushed at the end (one process: a crash loses the run anyway)


class HostCoordinator(Coordinator):
    """The coordinator whose agents live in its own loop."""

    def __init__(self, cfg: dict) -> None:
        super().__init__(cfg)
        self.hosted: dict[str, Agent] = {}

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
                netns=a.get("netns"), on_report=self.on_report, record_buffering=RECORD_BUFFER_BYTES)
        missing = sorted(set(self.agents) - set(self.hosted))
        if missing:
            raise TrafficError(f"no hosted agent for {', '.join(missing[:8])}")

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
            emit("ready", agents=len(self.hosted))
            await self.serve()
            self.ended = True
            tasks = {t for a in self.hosted.values() for t in a._tasks}
            if tasks:  # everything arrived; let the senders read their acks
                await asyncio.wait(tasks, timeout=float(self.cfg.get("transfer_timeout_s", 60)))
        finally:
            for agent in self.hosted.values():
                await agent.shutdown(asyncio.create_task(asyncio.sleep(0)))
            for fh in self.plans.values():
                fh.close()
        return self.results()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m traffic.runtime.host CONFIG.json", file=sys.stderr)
        return 2
    try:
        cfg = json.loads(Path(args[0]).read_text())
        res = asyncio.run(HostCoordinator(cfg).run())
    except (OSError, TrafficError, KeyError, ValueError) as exc:
        emit("error", message=f"{type(exc).__name__}: {exc}")
        return 1
    emit("done", results=res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
