"""Which host each switch and GPU of a fabric lives on, and which cables cross hosts (pure logic).

Rules (issue 26), and how they are met:

* A switch is never split: a switch is one Open vSwitch bridge on one host.
* A GPU lives with the switch of its NIC port 1 (its *anchor*). Why port 1: on ROFT both ports
  go to one leaf, so port 1's switch is simply the GPU's switch; on ZCube port 1's switch is the
  multi-rail (odd) switch, the one that plays ROFT's rail leaf. One rule then cuts both fabrics
  along rails. ZCube's wiring is symmetric in its two ports (odd and even switches swap roles
  under a renumbering of the GPUs), so anchoring on port 2 would cross as many cables
  (``tests/unit/emulation/hosts/test_assign.py`` computes both); port 1 is the choice that means the
  same thing on both fabrics.
* Balance: anchors (and so GPUs, agents, NIC queues) as evenly as possible over the hosts, then
  switches as evenly as possible. Without balance, everything on one host crosses nothing.
* Cut: the anchors in switch order split into contiguous blocks, one per host (ZCube: runs of
  odd switches; ROFT: whole rails, since leaves are numbered rail by rail). The other switches
  (ZCube's even switches, ROFT's spines) are then assigned, within each host's share of the
  switches, to maximise the cables that stay inside a host (an exact assignment: a min-cost flow).
  Those switches have no cables among themselves in either fabric, so given the anchors the
  assignment is optimal; for the sizes the tests can enumerate, the whole placement is optimal
  among balanced ones (brute force in the tests).

A cable *crosses* when its two ends are on different hosts; a cross-host cable becomes one
tunnel (``tunnels.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common.errors import TestbedError
from fabrics.topology import Cable, Fabric


@dataclass
class HostAssignment:
    fabric: Fabric
    hosts: list[str]
    switch_host: dict[str, str]
    gpu_host: dict[int, str]
    anchor_port: int = 1
    cross: list[Cable] = field(default_factory=list)

    def host_of(self, node: str) -> str:
        """The host of a switch name or ``gpu<i>``."""
        if node.startswith("gpu") and node[3:].isdigit():
            return self.gpu_host[int(node[3:])]
        return self.switch_host[node]

    def crosses(self, cable: Cable) -> bool:
        return self.host_of(cable.a) != self.host_of(cable.b)

    def switches_on(self, host: str) -> list[str]:
        return [s for s in self.fabric.switches if self.switch_host[s] == host]

    def gpus_on(self, host: str) -> list[int]:
        return [g for g in self.fabric.gpus() if self.gpu_host[g] == host]

    @property
    def cross_fabric(self) -> int:
        return sum(1 for c in self.cross if c.kind == "fabric")

    @property
    def cross_host(self) -> int:
        return sum(1 for c in self.cross if c.kind == "host")

    def summary(self) -> dict:
        """Per host: switches, GPUs, cross cables touching it; and the totals."""
        per_host = []
        for h in self.hosts:
            touching = [c for c in self.cross if h in (self.host_of(c.a), self.host_of(c.b))]
            per_host.append({"host": h, "switches": self.switches_on(h), "gpus": self.gpus_on(h),
                             "cross_cables": len(touching)})
        return {"fabric": self.fabric.describe(), "hosts": per_host, "anchor_port": self.anchor_port,
                "cables": len(self.fabric.cables), "cross_cables": len(self.cross),
                "cross_fabric_cables": self.cross_fabric, "cross_host_cables": self.cross_host}


def _shares(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` as evenly as possible, the larger shares first."""
    q, r = divmod(total, parts)
    return [q + (1 if i < r else 0) for i in range(parts)]


def _switch_order(fabric: Fabric) -> list[str]:
    return sorted(fabric.switches, key=lambda s: fabric.switches[s].dpid)


def anchors(fabric: Fabric, port: int = 1) -> list[str]:
    """The switches some GPU's NIC ``port`` is cabled to, in switch (DPID) order."""
    used = {fabric.attachment[(g, port)][0] for g in fabric.gpus()}
    return [s for s in _switch_order(fabric) if s in used]


def assign(fabric: Fabric, hosts: list[str], anchor_port: int = 1) -> HostAssignment:
    """The placement of ``fabric`` on ``hosts`` (in order; the first runs the controller)."""
    if not hosts:
        raise TestbedError("a placement needs at least one host")
    if len(set(hosts)) != len(hosts):
        raise TestbedError("host names must be distinct")
    anc = anchors(fabric, anchor_port)
    if len(hosts) > len(anc):
        raise TestbedError(f"{fabric.describe()} has {len(anc)} switches that GPUs hang from "
                           f"({', '.join(anc[:4])}{', ...' if len(anc) > 4 else ''}): it can be split over at "
                           f"most {len(anc)} hosts, not {len(hosts)}")
    switch_host: dict[str, str] = {}
    start = 0
    for h, n in zip(hosts, _shares(len(anc), len(hosts))):
        for s in anc[start:start + n]:
            switch_host[s] = h
        start += n
    gpu_host = {g: switch_host[fabric.attachment[(g, anchor_port)][0]] for g in fabric.gpus()}
    others = [s for s in _switch_order(fabric) if s not in switch_host]
    totals = _shares(len(fabric.switches), len(hosts))
    have = [sum(1 for s in switch_host.values() if s == h) for h in hosts]
    room = [max(0, t - a) for t, a in zip(totals, have)]
    for i in range(len(others) - sum(room)):  # only if a host's anchors overfilled its share
        room[sorted(range(len(hosts)), key=lambda j: (have[j] + room[j], j))[0]] += 1
    switch_host.update(_assign(fabric, others, hosts, room, switch_host, gpu_host))
    p = HostAssignment(fabric, list(hosts), switch_host, gpu_host, anchor_port)
    p.cross = [c for c in fabric.cables if p.crosses(c)]
    return p


def _affinity(fabric: Fabric, switch: str, hosts: list[str], switch_host: dict[str, str],
              gpu_host: dict[int, str]) -> list[int]:
    """Per host: cables of ``switch`` whose other end is already on that host."""
    aff = dict.fromkeys(hosts, 0)
    for peer, _ in fabric.switches[switch].ports.values():
        if peer.startswith("gpu"):
            aff[gpu_host[int(peer[3:])]] += 1
        elif peer in switch_host:
            aff[switch_host[peer]] += 1
    return [aff[h] for h in hosts]


def _assign(fabric: Fabric, items: list[str], hosts: list[str], room: list[int], switch_host: dict[str, str],
            gpu_host: dict[int, str]) -> dict[str, str]:
    """Each of ``items`` to a host with room, maximising the cables kept inside hosts (min-cost flow;
    ties: earlier switches to earlier hosts)."""
    if not items:
        return {}
    import networkx as nx

    n, h = len(items), len(hosts)
    tie = h * n * n + 1  # one cable kept outweighs any tie-break
    g = nx.DiGraph()
    for i, s in enumerate(items):
        g.add_edge("src", ("s", i), capacity=1, weight=0)
        for j, aff in enumerate(_affinity(fabric, s, hosts, switch_host, gpu_host)):
            if room[j]:
                g.add_edge(("s", i), ("h", j), capacity=1, weight=-aff * tie + j * (n - i))
    for j in range(h):
        if room[j]:
            g.add_edge(("h", j), "dst", capacity=room[j], weight=0)
    flow = nx.max_flow_min_cost(g, "src", "dst")
    out = {}
    for i, s in enumerate(items):
        j = next(j for (_, j), f in flow[("s", i)].items() if f)
        out[s] = hosts[j]
    return out


def cross_count(fabric: Fabric, switch_host: dict[str, str], anchor_port: int = 1) -> int:
    """Cables crossing hosts for an arbitrary switch placement (GPUs with their anchor): for tests."""
    gpu_host = {g: switch_host[fabric.attachment[(g, anchor_port)][0]] for g in fabric.gpus()}

    def host(node: str) -> str:
        return gpu_host[int(node[3:])] if node.startswith("gpu") else switch_host[node]

    return sum(1 for c in fabric.cables if host(c.a) != host(c.b))


def ranges(nums: list[int]) -> str:
    """[1, 2, 3, 5, 9, 10] -> '1-3,5,9-10'."""
    out, i = [], 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(out)


def text(p: HostAssignment, addresses: dict[str, str] | None = None) -> list[str]:
    """The placement as lines for ``plan --hosts``."""
    s = p.summary()
    lines = [f"{s['fabric']} on {len(p.hosts)} host{'s' if len(p.hosts) > 1 else ''} "
             f"(GPUs with the switch of their port {p.anchor_port}):"]
    for i, row in enumerate(s["hosts"]):
        role = "  controller, coordinator" if i == 0 else ""
        addr = f" {addresses[row['host']]}" if addresses else ""
        lines.append(f"  {row['host']}{addr}: {len(row['switches'])} switches ({' '.join(row['switches'])}), "
                     f"{len(row['gpus'])} GPUs ({ranges(row['gpus'])}), {row['cross_cables']} cross-host "
                     f"cables{role}")
    lines.append(f"cross-host cables: {s['cross_cables']} of {s['cables']} ({s['cross_fabric_cables']} "
                 f"switch-switch, {s['cross_host_cables']} GPU-switch): one tunnel each")
    return lines
