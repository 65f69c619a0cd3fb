"""Switch connections in memory, for the session core (``controller.session.Switch``).

``FakeDatapath`` keeps its flow and group tables like an OpenFlow 1.3 switch:
a flow-mod with an existing (priority, match) replaces that entry, a delete
empties the tables, and a barrier or stats request queues its reply, answered
from the tables as they are at the request. ``deliver`` hands queued replies
to the core, so a test decides what the switch answers and when. Faults:
``drop`` loses rules on their way in; ``install`` adds a rule behind the
controller's back.

``FakeFabric`` connects one fake per switch of a fabric and carries packet-outs
over the fabric's cables, through the receiving switch's installed table.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from controller.rules import FlowSpec, GroupSpec, SwitchProgram
from controller.session import FabricSessions, FlowStat
from testbed.fabric import Fabric
from tests.fakes.flow_table import FakeFlowTable


class FakeDatapath:
    """One connection to one switch; a reconnect is a new FakeDatapath (they never compare equal)."""

    def __init__(self, dpid: int | None, *, part_size: int | None = None,
                 drop: Callable[[FlowSpec | GroupSpec], bool] = lambda rule: False) -> None:
        self.dpid = dpid
        self.part_size = part_size  # flow-stats entries per reply part; None: one part
        self.drop = drop
        self.flows: dict[tuple, FlowSpec] = {}  # (priority, match) -> entry, in installation order
        self.counters: dict[tuple, int] = {}
        self.groups: dict[int, GroupSpec] = {}
        self.calls: list[tuple] = []  # every call of the core, in order
        self.packets_out: list[tuple[int, bytes]] = []
        self.pending: deque[tuple] = deque()

    # -- the Switch interface
    def clear(self) -> None:
        self.calls.append(("clear",))
        self.flows.clear()
        self.counters.clear()
        self.groups.clear()

    def add_group(self, group: GroupSpec) -> None:
        self.calls.append(("add_group", group))
        if not self.drop(group):
            self.groups[group.group_id] = group

    def add_flow(self, flow: FlowSpec) -> None:
        self.calls.append(("add_flow", flow))
        if not self.drop(flow):
            self.install(flow)

    def barrier(self) -> None:
        self.calls.append(("barrier",))
        self.pending.append(("barrier",))

    def request_groups(self) -> None:
        self.calls.append(("request_groups",))
        self.pending.append(("groups", list(self.groups.values())))

    def request_flows(self, table_id: int | None = None) -> None:
        self.calls.append(("request_flows", table_id))
        stats = [FlowStat(flow, self.counters[key]) for key, flow in self.flows.items()]
        size = self.part_size or max(len(stats), 1)
        parts = [stats[i:i + size] for i in range(0, len(stats), size)] or [[]]
        for i, part in enumerate(parts):
            self.pending.append(("flows", part, i < len(parts) - 1))

    def packet_out(self, port: int, data: bytes) -> None:
        self.calls.append(("packet_out", port))
        self.packets_out.append((port, data))

    # -- test controls
    def install(self, flow: FlowSpec) -> None:
        """Put a rule in the table (replacing one with the same priority and match)."""
        key = (flow.priority, flow.match)
        self.flows[key] = flow
        self.counters[key] = 0

    def count(self, flow: FlowSpec, packets: int) -> None:
        """Let ``packets`` packets hit ``flow``."""
        self.counters[(flow.priority, flow.match)] += packets

    def deliver(self, core: FabricSessions, limit: int | None = None) -> int:
        """Hand up to ``limit`` queued replies (all by default) to the core; how many were handed."""
        n = 0
        while self.pending and (limit is None or n < limit):
            kind, *args = self.pending.popleft()
            if kind == "barrier":
                core.barrier_reply(self)
            elif kind == "groups":
                core.groups_reply(self, *args)
            else:
                core.flows_reply(self, *args)
            n += 1
        return n

    def program(self, switch: str = "") -> SwitchProgram:
        """What the switch holds now, as a program (to run packets through a FakeFlowTable)."""
        return SwitchProgram(switch, self.dpid, list(self.flows.values()), list(self.groups.values()))


class FakeFabric:
    """One FakeDatapath per switch of a fabric, cabled as the fabric says (or miswired)."""

    def __init__(self, fabric: Fabric, **datapath_options) -> None:
        self.fabric = fabric
        self.datapaths = {name: FakeDatapath(sw.dpid, **datapath_options) for name, sw in fabric.switches.items()}

    def connect(self, core: FabricSessions) -> None:
        for dp in self.datapaths.values():
            core.switch_connected(dp)

    def deliver(self, core: FabricSessions) -> None:
        while any(dp.deliver(core) for dp in self.datapaths.values()):
            pass

    def carry_packets(self, core: FabricSessions, miswire: dict[tuple[str, int], str] | None = None,
                      lose: Callable[[str, int], bool] = lambda switch, port: False) -> int:
        """Carry every packet-out to the switch its cable reaches (``miswire``: (switch, port) -> the
        switch reached instead) and punt it to the core if that switch's table sends it to the
        controller. Lost packets (``lose``) go nowhere. Returns how many were punted."""
        punted = 0
        for name, dp in self.datapaths.items():
            sent, dp.packets_out = dp.packets_out, []
            for port, data in sent:
                peer = (miswire or {}).get((name, port), self.fabric.switches[name].ports[port][0])
                if lose(name, port) or peer not in self.datapaths:
                    continue
                receiver = self.datapaths[peer]
                header = {"eth_type": int.from_bytes(data[12:14], "big"),
                          "eth_dst": ":".join(f"{b:02x}" for b in data[:6])}
                if FakeFlowTable(receiver.program(peer)).forward(header) == ["controller"]:
                    core.packet_in(receiver, data)
                    punted += 1
        return punted
