"""A switch's OpenFlow table in memory, to run packets through a program without a switch."""

from __future__ import annotations

from collections.abc import Iterable

from controller.rules import FAST_FAILOVER, FlowSpec, SwitchProgram
from fabrics.routing import ecmp_bucket


class FakeFlowTable:
    """Highest-priority match wins; a select group picks one of its live buckets by the model's 5-tuple hash,
    a fast-failover group its first live bucket. A bucket is live unless it watches a port in ``down`` (the
    switch's ports without link). Counts packets per rule."""

    def __init__(self, program: SwitchProgram, down: Iterable[int] = ()) -> None:
        self.program = program
        self.down = frozenset(down)
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
                group = self.groups[arg]
                live = [p for p in group.ports if not (group.watched and p in self.down)]
                if not live:
                    continue  # no live bucket: the group drops
                if group.kind == FAST_FAILOVER:
                    out.append(live[0])
                else:
                    key = (pkt.get("ipv4_src"), pkt.get("ipv4_dst"), pkt.get("ip_proto"),
                           pkt.get("tp_src"), pkt.get("tp_dst"))
                    out.append(live[ecmp_bucket(key, len(live))])
        return out
