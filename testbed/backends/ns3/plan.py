"""The fabric model as an ns-3 network: one node per GPU (two NIC devices) and per switch, one
point-to-point link per cable, each queue's limit and PFC thresholds from the PFC policy, and the
route of each connection from the model's forwarding tables (``route``).

Routes are installed per connection (5-tuple), for its data and its ACKs, when it opens: at every switch
the model's table gives the next hop; an ECMP group (ROFT) picks its member with the model's hash
(``fabrics.routing.ecmp_bucket``: CRC-32) of (src ip, dst ip, 6, src port, dst port, switch).
The source port is the connection's ephemeral port, drawn from the hash seed (``source_port``; by default the
repetition's seed): the port lottery that decides which flows collide, as the kernel's does on the emulator.
A separate ``hash_seed`` draws a fresh ECMP outcome without changing the cluster's expert routing (which
follows the repetition's seed); ``Built.ecmp_outcome`` records which outcome a run had.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections import Counter
from dataclasses import dataclass, field

from fabrics import Fabric, addressing
from fabrics.routing import ForwardingTables, ecmp_bucket, forwarding_tables
from testbed.backends.base import LinkSettings, QueueInfo
from testbed.backends.ns3 import engine
from testbed.backends.ns3.pfc import queue_params, shared_pool
from traffic.runtime import wire
from traffic.runtime.ports import EPHEMERAL, source_port  # noqa: F401 (the emulator's rule; EPHEMERAL re-exported)

CABLE_DELAY_S = 2e-6  # propagation and switching per cable (the emulator's is its agents' and OVS's delay)
LISTEN_PORT = 5201


def ip_int(ip: str) -> int:
    return int(ipaddress.IPv4Address(ip))


def route(fabric: Fabric, tables: ForwardingTables, src: tuple[int, int], dst: tuple[int, int], sport: int,
          dport: int, seed: int = 0) -> list[tuple[str, int]]:
    """(switch, output port) hops of the flow from NIC port ``src`` to ``dst`` with these TCP ports: the
    model's table at each switch, ECMP by the model's hash."""
    src_ip, dst_ip = addressing.ip_of(*src), addressing.ip_of(*dst)
    target = (addressing.host_name(dst[0]), dst[1])
    switch = fabric.switch_of(*src)
    hops: list[tuple[str, int]] = []
    while True:
        ports = tables[switch][dst_ip].ports
        port = ports[ecmp_bucket((src_ip, dst_ip, 6, sport, dport, switch), len(ports))] if len(ports) > 1 \
            else ports[0]
        hops.append((switch, port))
        peer, peer_port = fabric.peer(switch, port)
        if peer.startswith("gpu"):
            if (peer, peer_port) != target:
                raise RuntimeError(f"{switch} port {port} delivers {dst_ip} to {peer}:p{peer_port}")
            return hops
        if len(hops) > len(fabric.switches):
            raise RuntimeError(f"forwarding loop towards {dst_ip}: {hops}")
        switch = peer


@dataclass
class Built:
    """The twin's network: the C++ object and how its queues and nodes map to the model's names."""

    twin: object
    fabric: Fabric
    tables: ForwardingTables
    seed: int
    switch_index: dict[str, int]
    queues: list[QueueInfo]  # in the order of ``Twin::Snapshot``
    hash_seed: int | None = None  # the ECMP port lottery's seed (None: ``seed``)
    conns: dict[tuple[int, int, int, int], int] = field(default_factory=dict)  # (src gpu, sp, dst gpu, dp) -> id
    sports: dict[tuple[int, int, int, int], int] = field(default_factory=dict)
    used_ports: set = field(default_factory=set)
    link_flows: Counter = field(default_factory=Counter)  # (switch, port) to another switch -> flows routed on it

    @property
    def port_seed(self) -> int:
        """The seed the source ports are drawn from: ``hash_seed``, or the repetition's seed."""
        return self.seed if self.hash_seed is None else self.hash_seed

    def connection(self, src: int, sp: int, dst: int, dp: int) -> int:
        """The persistent connection between two NIC ports (opened, and its routes installed, on first use)."""
        key = (src, sp, dst, dp)
        ci = self.conns.get(key)
        if ci is not None:
            return ci
        src_ip, dst_ip = addressing.ip_of(src, sp), addressing.ip_of(dst, dp)
        sport = source_port(self.port_seed, src_ip, dst_ip, self.used_ports)
        for a, b, pa, pb in (((src, sp), (dst, dp), sport, LISTEN_PORT), ((dst, dp), (src, sp), LISTEN_PORT, sport)):
            ia, ib = ip_int(addressing.ip_of(*a)), ip_int(addressing.ip_of(*b))
            for switch, port in route(self.fabric, self.tables, a, b, pa, pb, self.seed):
                self.twin.Route(self.switch_index[switch], ia, ib, pa, pb, port)
                if not self.fabric.peer(switch, port)[0].startswith("gpu"):
                    self.link_flows[(switch, port)] += 1
        ci = int(self.twin.Open(src - 1, sp, sport, dst - 1, dp))
        self.conns[key] = ci
        self.sports[key] = sport
        return ci


def build(fabric: Fabric, link: LinkSettings, resolved, seed: int = 0, hash_seed: int | None = None) -> Built:
    """The ns-3 network of ``fabric`` with ``link``'s rate, MTU and buffers and the PFC settings
    ``resolved`` (None: off); ``hash_seed`` draws the connections' source ports, hence the ECMP outcome
    (None: ``seed``, the repetition's). Call ``engine.configure`` first."""
    tb = engine.load()
    twin = tb.Twin(float(link.rate_bps), int(link.mtu), CABLE_DELAY_S, int(link.nic_buffer_bytes), LISTEN_PORT)
    # the agents' wire format: a frame header before each message, an ack back for each whole frame
    twin.frameHeader, twin.ackBytes = wire.HEADER.size, wire.ACK.size
    if resolved is not None:
        twin.pfc = True
        twin.alpha = float(resolved.dynamic_alpha or 0.0)
    params = queue_params(fabric, link, resolved)
    for g in fabric.gpus():
        twin.AddGpu(ip_int(addressing.ip_of(g, 1)), ip_int(addressing.ip_of(g, 2)))
    index = {}
    for name in fabric.switches:
        index[name] = int(twin.AddSwitch(name, shared_pool(fabric, name, resolved)))
    switch_queues: list[QueueInfo] = []
    nic_queues: list[QueueInfo] = []
    done: set[tuple[str, int]] = set()
    for name, sw in fabric.switches.items():
        for port, (peer, peer_port) in sorted(sw.ports.items()):
            if (name, port) in done:
                continue
            q = params[f"{name}:{port}"]
            if peer.startswith("gpu"):
                g = int(peer[3:])
                twin.CableHost(g - 1, peer_port, index[name], port, q.limit, q.xoff, q.xon)
                switch_queues.append(QueueInfo(f"{name}:{port}", "switch", f"gpu{g}:p{peer_port}"))
                nic_queues.append(QueueInfo(f"gpu{g}:p{peer_port}", "nic", name))
            else:
                r = params[f"{peer}:{peer_port}"]
                twin.CableSwitches(index[name], port, index[peer], peer_port, q.limit, q.xoff, q.xon, r.limit,
                                   r.xoff, r.xon)
                switch_queues.append(QueueInfo(f"{name}:{port}", "switch", peer))
                switch_queues.append(QueueInfo(f"{peer}:{peer_port}", "switch", name))
                done.add((peer, peer_port))
            done.add((name, port))
    twin.Finish()
    return Built(twin, fabric, forwarding_tables(fabric), seed, index, switch_queues + nic_queues, hash_seed)


def ecmp_outcome(built: Built) -> dict:
    """Which ECMP outcome the run had (twin.json): the hash seed, the connections opened, a digest of their
    source ports (the whole lottery: same digest, same paths) and the flows (one per direction of a
    connection) routed on each switch-to-switch link: how many links carried flows, the most and the mean
    per link, and a digest of the per-link counts."""
    ports = "\n".join(f"{k[0]},{k[1]},{k[2]},{k[3]}:{v}" for k, v in sorted(built.sports.items()))
    counts = "\n".join(f"{sw}:{p}={n}" for (sw, p), n in sorted(built.link_flows.items()))
    per_link = list(built.link_flows.values())
    return {"hash_seed": built.port_seed, "hash_seed_given": built.hash_seed is not None,
            "connections": len(built.sports),
            "ports_sha256": hashlib.sha256(ports.encode()).hexdigest()[:16],
            "switch_links_with_flows": len(per_link), "flows_per_switch_link_max": max(per_link, default=0),
            "flows_per_switch_link_mean": round(sum(per_link) / len(per_link), 3) if per_link else 0.0,
            "flows_per_switch_link_sha256": hashlib.sha256(counts.encode()).hexdigest()[:16]}


def installed_path(built: Built, src: tuple[int, int], dst: tuple[int, int]) -> list[tuple[str, int]]:
    """The hops the twin's switches forward the connection src -> dst on (after ``connection``), read from
    their flow tables."""
    sport = built.sports[(src[0], src[1], dst[0], dst[1])]
    a, b = ip_int(addressing.ip_of(*src)), ip_int(addressing.ip_of(*dst))
    switch = built.fabric.switch_of(*src)
    hops: list[tuple[str, int]] = []
    while len(hops) <= len(built.fabric.switches):
        port = int(built.twin.Lookup(built.switch_index[switch], a, b, sport, LISTEN_PORT))
        if port < 0:
            raise RuntimeError(f"{switch} has no flow entry for {src} -> {dst}")
        hops.append((switch, port))
        peer, _ = built.fabric.peer(switch, port)
        if peer.startswith("gpu"):
            return hops
        switch = peer
    raise RuntimeError(f"forwarding loop: {hops}")
