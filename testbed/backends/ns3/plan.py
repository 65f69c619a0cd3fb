"""The fabric model as an ns-3 network: one node per GPU (two NIC devices) and per switch, one
point-to-point link per cable, each queue's limit and PFC thresholds from the PFC policy, and the
route of each connection from the path book (``testbed.backends.paths``).

Routes are installed per connection (5-tuple), for its data and its ACKs, when it opens, as the path book
gives them: the source port drawn from the hash seed (by default the repetition's seed: the port lottery that
decides which flows collide, as the kernel's does on the emulator), then the model's forwarding tables and, in
an ECMP group (ROFT), the model's hash; or an emulator repetition's recorded ports and paths. A separate
``hash_seed`` draws a fresh ECMP outcome without changing the cluster's expert routing (which follows the
repetition's seed); ``ecmp_outcome`` records which outcome a run had.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from dataclasses import dataclass, field

from fabrics import Fabric, addressing
from testbed.backends.base import LinkSettings, QueueInfo
from testbed.backends.ns3 import assumptions, engine
from testbed.backends.ns3.pfc import queue_params, shared_pool
from testbed.backends.paths import LISTEN_PORT, PathBook, Recording
from traffic.runtime import wire
from traffic.runtime.sender import FAST_PATH_BYTES

# propagation per cable, the twin's default (twin.cable_delay_us; the emulator's is its agents' and OVS's delay)
CABLE_DELAY_S = assumptions.DEFAULT.cable_delay_us * 1e-6


def ip_int(ip: str) -> int:
    return int(ipaddress.IPv4Address(ip))


@dataclass
class Built:
    """The twin's network: the C++ object, how its queues and nodes map to the model's names, and the path book
    that routes its connections (``testbed.backends.paths``: the model's hash, or an emulator run's recording)."""

    twin: object
    fabric: Fabric
    paths: PathBook
    switch_index: dict[str, int]
    queues: list[QueueInfo]  # in the order of ``Twin::Snapshot``
    hash_seed: int | None = None  # the ECMP port lottery's seed as given (None: the repetition's)
    conns: dict[tuple[int, int, int, int], int] = field(default_factory=dict)  # (src gpu, sp, dst gpu, dp) -> id

    @property
    def sports(self) -> dict[tuple[int, int, int, int], int]:
        """Each opened connection's source port, by (src gpu, sp, dst gpu, dp)."""
        return {(s[0], s[1], d[0], d[1]): c.sport for (s, d), c in self.paths.opened.items()}

    @property
    def link_flows(self) -> Counter:
        return self.paths.link_flows

    def connection(self, src: int, sp: int, dst: int, dp: int) -> int:
        """The persistent connection between two NIC ports (opened, and its routes installed, on first use)."""
        key = (src, sp, dst, dp)
        ci = self.conns.get(key)
        if ci is not None:
            return ci
        c = self.paths.connection((src, sp), (dst, dp))
        ia, ib = ip_int(addressing.ip_of(src, sp)), ip_int(addressing.ip_of(dst, dp))
        for hops, a, b, pa, pb in ((c.forward, ia, ib, c.sport, c.dport), (c.reverse, ib, ia, c.dport, c.sport)):
            for switch, port in hops:
                self.twin.Route(self.switch_index[switch], a, b, pa, pb, port)
        ci = int(self.twin.Open(src - 1, sp, c.sport, dst - 1, dp))
        self.conns[key] = ci
        return ci


def build(fabric: Fabric, link: LinkSettings, resolved, seed: int = 0, hash_seed: int | None = None,
          recording: Recording | None = None, model=None) -> Built:
    """The ns-3 network of ``fabric`` with ``link``'s rate, MTU and buffers and the PFC settings
    ``resolved`` (None: off); ``hash_seed`` draws the connections' source ports, hence the ECMP outcome
    (None: ``seed``, the repetition's); ``recording``: an emulator run's paths to follow instead of the hash;
    ``model``: the experiment's ``twin`` section, or an ``assumptions.Assumptions`` (delays, burst; None: the
    defaults). Call ``engine.configure`` first."""
    tb = engine.load()
    model = assumptions.DEFAULT if model is None else model
    twin = tb.Twin(float(link.rate_bps), int(link.mtu), model.cable_delay_us * 1e-6, int(link.nic_buffer_bytes),
                   LISTEN_PORT)
    # seconds: a switch's forwarding time per packet, the senders' delay per message (0: none)
    twin.hopDelayS, twin.sendDelayS = model.hop_delay_us * 1e-6, model.send_delay_us * 1e-6
    twin.burstBytes = int(model.burst_bytes or 0)  # before the cables: with a bucket they run faster
    # the agents' wire format: a frame header before each message, an ack back for each whole frame; a small
    # message on an idle connection in one write, as the agents' Channel.submit sends it
    twin.frameHeader, twin.ackBytes = wire.HEADER.size, wire.ACK.size
    twin.oneWriteBytes = FAST_PATH_BYTES
    if resolved is not None:
        twin.pfc = True
        twin.alpha = float(resolved.dynamic_alpha or 0.0)
        twin.reactionS = model.pause_reaction_us * 1e-6
        twin.headroom = int(resolved.headroom_bytes)
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
    book = PathBook(fabric, seed if hash_seed is None else hash_seed, recording)
    return Built(twin, fabric, book, index, switch_queues + nic_queues, hash_seed)


def ecmp_outcome(built: Built) -> dict:
    """Which ECMP outcome the run had (twin.json): ``PathBook.outcome`` and whether the hash seed was given."""
    return built.paths.outcome() | {"hash_seed_given": built.hash_seed is not None}


def installed_path(built: Built, src: tuple[int, int], dst: tuple[int, int], reverse: bool = False
                   ) -> list[tuple[str, int]]:
    """The hops the twin's switches forward the connection src -> dst on (after ``connection``), read from
    their flow tables; ``reverse``: its dst -> src direction (ACKs)."""
    sport = built.paths.opened[(src, dst)].sport
    a, b = ip_int(addressing.ip_of(*src)), ip_int(addressing.ip_of(*dst))
    key = (b, a, LISTEN_PORT, sport) if reverse else (a, b, sport, LISTEN_PORT)
    switch = built.fabric.switch_of(*(dst if reverse else src))
    hops: list[tuple[str, int]] = []
    while len(hops) <= len(built.fabric.switches):
        port = int(built.twin.Lookup(built.switch_index[switch], *key))
        if port < 0:
            raise RuntimeError(f"{switch} has no flow entry for {src} -> {dst}{' (reverse)' if reverse else ''}")
        hops.append((switch, port))
        peer, _ = built.fabric.peer(switch, port)
        if peer.startswith("gpu"):
            return hops
        switch = peer
    raise RuntimeError(f"forwarding loop: {hops}")
