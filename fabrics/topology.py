"""Plain-Python fabric description shared by emulator, controller, traffic and reports.

A ``Fabric`` is switches, GPUs and cables. Every switch port has an OpenFlow
port number fixed here, so the controller, the emulator and the path query all
agree on which cable is which. Builders (``zcube.py``, ``roft.py``) only decide
the wiring; everything else is derived.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from fabrics import addressing


@dataclass(frozen=True)
class Cable:
    """One physical cable. ``a``/``b`` are node names; ports are OpenFlow ports
    on switches and NIC ports (1, 2) on GPUs. ``index`` numbers parallel cables
    between the same two switches from 0."""

    a: str
    a_port: int
    b: str
    b_port: int
    kind: str  # "host" (GPU NIC to switch) or "fabric" (switch to switch)
    index: int = 0

    def endpoint(self, side: str) -> str:
        """Plan-JSON endpoint: ``gpu<i>:p<port>`` for a GPU port, the switch name otherwise."""
        node, port = (self.a, self.a_port) if side == "a" else (self.b, self.b_port)
        if node.startswith("gpu"):
            return addressing.endpoint_name(int(node[3:]), port)
        return node


@dataclass
class Switch:
    name: str
    dpid: int
    role: str  # "odd", "even", "leaf", "spine"
    radix: int  # ports the switch has (used or not)
    ports: dict[int, tuple[str, int]] = field(default_factory=dict)  # of_port -> (peer, peer_port)


@dataclass
class Fabric:
    """A built fabric. ``params`` records what it was built from."""

    kind: str  # "zcube" or "roft"
    n_gpus: int
    params: dict
    switches: dict[str, Switch]
    cables: list[Cable]
    oversubscription: float  # downlink : uplink capacity per switch (1.0 = non-blocking)

    # ------------------------------------------------------------------ lookups
    @cached_property
    def attachment(self) -> dict[tuple[int, int], tuple[str, int]]:
        """(gpu, nic port) -> (switch, OpenFlow port)."""
        out = {}
        for c in self.cables:
            if c.kind == "host":
                out[(int(c.a[3:]), c.a_port)] = (c.b, c.b_port)
        return out

    @cached_property
    def nic_ips(self) -> tuple[tuple[str, tuple[int, int]], ...]:
        """(address, (gpu, nic port)) of every NIC port, in (gpu, port) order: the destinations of the
        forwarding tables, in the order they list them."""
        return tuple((addressing.ip_of(g, p), (g, p)) for g, p in sorted(self.attachment))

    @cached_property
    def nic_of_ip(self) -> dict[str, tuple[int, int]]:
        """NIC port address -> (gpu, nic port)."""
        return dict(self.nic_ips)

    @cached_property
    def _ports_by_peer(self) -> dict[str, dict[str, tuple[int, ...]]]:
        """switch -> neighbour -> the switch's OpenFlow ports cabled to it, in cable order (``ports_towards``
        without a scan of every port: a 256-port switch asked for each of 32,768 destinations)."""
        out: dict[str, dict[str, list[int]]] = {}
        for name, sw in self.switches.items():
            by_peer = out.setdefault(name, {})
            for port, (peer, _) in sw.ports.items():
                by_peer.setdefault(peer, []).append(port)
        return {name: {peer: tuple(sorted(ports)) for peer, ports in by.items()} for name, by in out.items()}

    def gpus(self) -> range:
        return range(1, self.n_gpus + 1)

    def switch_of(self, gpu: int, port: int) -> str:
        return self.attachment[(gpu, port)][0]

    def peer(self, switch: str, of_port: int) -> tuple[str, int]:
        return self.switches[switch].ports[of_port]

    def ports_towards(self, switch: str, neighbour: str) -> list[int]:
        """OpenFlow ports of ``switch`` cabled to ``neighbour``, in cable order."""
        return list(self._ports_by_peer[switch].get(neighbour, ()))

    @property
    def host_cables(self) -> list[Cable]:
        return [c for c in self.cables if c.kind == "host"]

    @property
    def fabric_cables(self) -> list[Cable]:
        return [c for c in self.cables if c.kind == "fabric"]

    def graph(self):
        """Switches and GPU NIC ports as a networkx multigraph (one edge per cable)."""
        import networkx as nx  # lazy: plain Mininet (mn --custom) runs without networkx

        g = nx.MultiGraph()
        for name, sw in self.switches.items():
            g.add_node(name, kind="switch", role=sw.role)
        for c in self.cables:
            a = c.endpoint("a")
            if c.kind == "host":
                g.add_node(a, kind="nic", gpu=int(c.a[3:]), port=c.a_port)
            g.add_edge(a, c.b, kind=c.kind, index=c.index)
        return g

    def describe(self) -> str:
        label = {"zcube": "ZCube", "roft": "ROFT", "railonly": "Rail-only"}[self.kind]
        p = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{label}({p})"


class FabricBuilder:
    """Incremental wiring helper: hands out OpenFlow port numbers in order."""

    def __init__(self) -> None:
        self.switches: dict[str, Switch] = {}
        self.cables: list[Cable] = []
        self._next_port: dict[str, int] = {}

    def add_switch(self, name: str, dpid: int, role: str, radix: int) -> None:
        self.switches[name] = Switch(name, dpid, role, radix)
        self._next_port[name] = 1

    def _take_port(self, switch: str) -> int:
        port = self._next_port[switch]
        self._next_port[switch] = port + 1
        return port

    def connect_gpu(self, gpu: int, nic_port: int, switch: str) -> None:
        of_port = self._take_port(switch)
        self.switches[switch].ports[of_port] = (addressing.host_name(gpu), nic_port)
        self.cables.append(Cable(addressing.host_name(gpu), nic_port, switch, of_port, "host"))

    def connect_switches(self, a: str, b: str, count: int) -> None:
        for index in range(count):
            pa, pb = self._take_port(a), self._take_port(b)
            self.switches[a].ports[pa] = (b, pb)
            self.switches[b].ports[pb] = (a, pa)
            self.cables.append(Cable(a, pa, b, pb, "fabric", index))
