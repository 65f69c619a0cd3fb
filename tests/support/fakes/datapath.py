"""Switch connections in memory, for the session core (``controller.session.Switch``).

``FakeDatapath`` keeps its flow and group tables like an OpenFlow 1.3 switch:
a flow-mod with an existing (priority, match) replaces that entry, a strict
delete removes one, deleting a group removes the flows that use it, adding a
group that exists or modifying one that does not is an error, and a barrier
or stats request queues its reply, answered from the tables as they are at
the request. ``deliver`` hands queued replies to the core, so a test decides
what the switch answers and when. Faults: ``drop`` loses rules on their way
in; ``install`` adds a rule behind the controller's back; ``set_port`` takes a
port down or up (the test tells the core, as a port-status would).
``reconnected`` is the same switch, tables and all, on a new connection (a
restarted controller).

``FakeFabric`` connects one fake per switch of a fabric and carries packet-outs
over the fabric's cables, through the receiving switch's installed table.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from controller.rules import FlowSpec, GroupSpec, SwitchProgram
from controller.session import FabricSessions, FlowStat
from fabrics import Fabric
from tests.support.fakes.flow_table import FakeFlowTable


class FakeDatapath:
    """One connection to one switch; a reconnect is a new FakeDatapath (they never compare equal)."""

    def __init__(self, dpid: int | None, *, part_size: int | None = None,
                 drop: Callable[[FlowSpec | GroupSpec], bool] = lambda rule: False, ports: Iterable[int] = ()) -> None:
        self.dpid = dpid
        self.part_size = part_size  # flow-stats entries per reply part; None: one part
        self.drop = drop
        self.flows: dict[tuple, FlowSpec] = {}  # (priority, match) -> entry, in installation order
        self.counters: dict[tuple, int] = {}
        self.groups: dict[int, GroupSpec] = {}
        self.ports: dict[int, bool] = dict.fromkeys(ports, True)  # OpenFlow port -> live
        self.calls: list[tuple] = []  # every call of the core, in order
        self.packets_out: list[tuple[int, bytes]] = []
        self.pending: deque[tuple] = deque()

    # -- the Switch interface
    def add_group(self, group: GroupSpec) -> None:
        self.calls.append(("add_group", group))
        if not self.drop(group):
            assert group.group_id not in self.groups, f"group {group.group_id} exists (OFPGMFC_GROUP_EXISTS)"
            self.groups[group.group_id] = group

    def modify_group(self, group: GroupSpec) -> None:
        self.calls.append(("modify_group", group))
        if not self.drop(group):
            assert group.group_id in self.groups, f"no group {group.group_id} (OFPGMFC_UNKNOWN_GROUP)"
            self.groups[group.group_id] = group

    def delete_group(self, group_id: int) -> None:
        self.calls.append(("delete_group", group_id))
        self.groups.pop(group_id, None)
        for key, flow in list(self.flows.items()):  # OpenFlow removes the flows that use a deleted group
            if ("group", group_id) in flow.actions:
                del self.flows[key], self.counters[key]

    def add_flow(self, flow: FlowSpec) -> None:
        self.calls.append(("add_flow", flow))
        if not self.drop(flow):
            self.install(flow)

    def delete_flow(self, flow: FlowSpec) -> None:
        self.calls.append(("delete_flow", flow))
        key = (flow.priority, flow.match)
        self.flows.pop(key, None)
        self.counters.pop(key, None)

    def barrier(self) -> None:
        self.calls.append(("barrier",))
        self.pending.append(("barrier",))

    def request_ports(self) -> None:
        self.calls.append(("request_ports",))
        self.pending.append(("ports", sorted(self.ports.items())))

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

    def set_port(self, port: int, live: bool) -> None:
        """Take a port down or bring it back (what a port-desc reply then says)."""
        self.ports[port] = live

    def down(self) -> set[int]:
        """The ports without link (for a FakeFlowTable: the buckets a switch skips)."""
        return {p for p, live in self.ports.items() if not live}

    def reconnected(self) -> FakeDatapath:
        """The same switch on a new connection: its tables, counters and ports as they are."""
        new = FakeDatapath(self.dpid, part_size=self.part_size, drop=self.drop, ports=self.ports)
        new.flows, new.counters, new.groups = dict(self.flows), dict(self.counters), dict(self.groups)
        new.ports = dict(self.ports)
        return new

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
            elif kind == "ports":
                core.ports_reply(self, *args)
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
        self.datapaths = {name: FakeDatapath(sw.dpid, ports=sw.ports, **datapath_options)
                          for name, sw in fabric.switches.items()}

    def connect(self, core: FabricSessions) -> None:
        for dp in self.datapaths.values():
            core.switch_connected(dp)

    def reconnect(self, core: FabricSessions, order: Iterable[str] | None = None) -> None:
        """Every switch, tables and all, connects again (to a restarted controller), in ``order`` if given."""
        for name in order or list(self.datapaths):
            self.datapaths[name] = self.datapaths[name].reconnected()
            core.switch_connected(self.datapaths[name])

    def cut(self, core: FabricSessions, switch: str, port: int, live: bool = False) -> None:
        """Both ends of the cable at (switch, port) lose link (or get it back) and report it, as OVS would."""
        peer, peer_port = self.fabric.peer(switch, port)
        for name, p in ((switch, port), (peer, peer_port)):
            if name in self.datapaths:
                self.datapaths[name].set_port(p, live)
                core.port_status(self.datapaths[name], p, live)

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
