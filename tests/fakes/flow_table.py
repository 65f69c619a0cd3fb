"""A switch's OpenFlow table in memory, to run packets through a program without a switch."""

from __future__ import annotations

from controller.rules import FlowSpec, SwitchProgram
from testbed.fabric.routing import ecmp_bucket


class FakeFlowTable:
    """Highest-priority match wins, select groups pick a bucket by the model's
    5-tuple hash. Counts packets per rule."""

    def __init__(self, program: SwitchProgram) -> None:
        self.program = program
        self.flows = sorted(program.flows, key=lambda f: -f.priority)
        self.groups = {g.group_id: g for g in program.groups}
        self.packets = {f: 0 for f in program.flows}

    def lookup(self, pkt: dict) -> FlowSpec:
        for flow in self.flows:
            if all(pkt.get(k) == v for k, v in flow.match):
                self.packets[flow] += 1
                return flow
        raise AssertionError("no table-miss rule")

    def forward(self, pkt: dict) -> list[int | str]:
        """Output ports for ``pkt`` ('controller' for a punt, [] for a drop)."""
        out: list[int | str] = []
        for kind, arg in self.lookup(pkt).actions:
            if kind == "output":
                out.append(arg)
            elif kind == "controller":
                out.append("controller")
            elif kind == "group":
                ports = self.groups[arg].ports
                key = (pkt.get("ipv4_src"), pkt.get("ipv4_dst"), pkt.get("ip_proto"),
                       pkt.get("tp_src"), pkt.get("tp_dst"))
                out.append(ports[ecmp_bucket(key, len(ports))])
        return out
