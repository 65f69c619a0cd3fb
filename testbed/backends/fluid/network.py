"""The fabric as the fluid engine's links and paths, and each message's bytes on the wire.

Links are the fabric's queues, as the twin lists them: every switch egress port, then every NIC port (its
transmit side), each at the link rate. A connection is the persistent one of a NIC port pair; its forward path is
the source NIC port then each switch's egress port to the destination NIC, its reverse path the same for the
acknowledgements, both from ``testbed.backends.paths.PathBook``: the twin's rule (the model's forwarding tables,
ECMP by ``fabrics.routing.ecmp_bucket`` of the 5-tuple with the source port ``traffic.runtime.ports.source_port``
draws), or an emulator run's recorded paths.

Bytes and time are the twin's (docs/fluid.md): emulated bytes on links of the emulated rate, the cluster's time
dilated, so every figure of the run directory compares with the twin's file for file. A message costs what the
agents put on the wire: the 24 B frame header in a packet of its own, the payload in MSS-sized packets, 66 B of
Ethernet/IP/TCP headers a packet; the receiver returns a 21 B ack and a delayed TCP ACK every two segments.
"""

from __future__ import annotations

import numpy as np

from common import scale
from fabrics import Fabric
from testbed.backends.base import LinkSettings, QueueInfo
from testbed.backends.ns3.plan import CABLE_DELAY_S
from testbed.backends.paths import PathBook, Recording
from traffic.runtime import wire

MAX_LINKS = 12  # forward and reverse links of a connection (either fabric: 4 + 4)


def queues(fabric: Fabric) -> list[QueueInfo]:
    """Every queue (link) of the fabric in the twin's order: switch egress ports, then NIC ports."""
    switch_queues, nic_queues = [], []
    done: set[tuple[str, int]] = set()
    for name, sw in fabric.switches.items():
        for port, (peer, peer_port) in sorted(sw.ports.items()):
            if (name, port) in done:
                continue
            if peer.startswith("gpu"):
                switch_queues.append(QueueInfo(f"{name}:{port}", "switch", f"{peer}:p{peer_port}"))
                nic_queues.append(QueueInfo(f"{peer}:p{peer_port}", "nic", name))
            else:
                switch_queues.append(QueueInfo(f"{name}:{port}", "switch", peer))
                switch_queues.append(QueueInfo(f"{peer}:{peer_port}", "switch", name))
                done.add((peer, peer_port))
            done.add((name, port))
    return switch_queues + nic_queues


def wire_bytes(payload: np.ndarray, mtu: int) -> tuple[np.ndarray, ...]:
    """Per message of ``payload`` bytes: (wire bytes forward, packets forward, bytes back, packets back, the last
    packet's wire bytes)."""
    mss = scale.payload_bytes(mtu)
    payload = np.asarray(payload, dtype=np.int64)
    data = -(-payload // mss)
    pk_fwd = 1 + data  # the frame header's packet, then the payload's
    fwd = payload + wire.HEADER.size + scale.HEADER_BYTES * pk_fwd
    acks = pk_fwd // 2  # delayed ACKs, one per two segments
    back = wire.ACK.size + scale.HEADER_BYTES * (1 + acks)
    last = (payload - 1) % mss + 1 + scale.HEADER_BYTES
    return fwd, pk_fwd, back, 1 + acks, last


class Paths:
    """The fabric's links and each connection's forward and reverse links (opened on first use)."""

    def __init__(self, fabric: Fabric, link: LinkSettings, port_seed: int, recording: Recording | None = None) -> None:
        self.fabric, self.link = fabric, link
        self.queues = queues(fabric)
        self.index = {q.qid: i for i, q in enumerate(self.queues)}
        self.book = PathBook(fabric, port_seed, recording)
        self.longest = MAX_LINKS
        self.conns: dict[tuple[int, int, int, int], int] = {}
        self.sports: list[int] = []
        self.links = np.zeros((64, self.longest), dtype=np.int64)
        self.nlinks = np.zeros(64, dtype=np.int64)
        self.nfwd = np.zeros(64, dtype=np.int64)

    @property
    def smallest_frame_bytes(self) -> int:
        """The smallest packet the agents send: the frame header alone (``wire_bytes``)."""
        return wire.HEADER.size + scale.HEADER_BYTES

    @property
    def capacity(self) -> np.ndarray:
        """Bytes per second of every link (the link rate)."""
        return np.full(len(self.queues), self.link.rate_bps / 8)

    def _links(self, a: tuple[int, int], hops) -> list[int]:
        return [self.index[f"gpu{a[0]}:p{a[1]}"]] + [self.index[f"{sw}:{port}"] for sw, port in hops]

    def connection(self, src: int, sp: int, dst: int, dp: int) -> int:
        """The persistent connection between two NIC ports (opened, its paths fixed by the path book, on first use,
        as the twin opens it)."""
        key = (src, sp, dst, dp)
        c = self.conns.get(key)
        if c is not None:
            return c
        conn = self.book.connection((src, sp), (dst, dp))
        fwd, back = self._links((src, sp), conn.forward), self._links((dst, dp), conn.reverse)
        if len(fwd) + len(back) > self.longest:
            raise RuntimeError(f"the path {src}:{sp} -> {dst}:{dp} and back crosses {len(fwd) + len(back)} links, "
                               f"more than {self.longest}")
        c = len(self.sports)
        if c >= len(self.nlinks):
            self.links = np.concatenate([self.links, np.zeros_like(self.links)])
            self.nlinks = np.concatenate([self.nlinks, np.zeros_like(self.nlinks)])
            self.nfwd = np.concatenate([self.nfwd, np.zeros_like(self.nfwd)])
        self.links[c, :len(fwd) + len(back)] = fwd + back
        self.nlinks[c], self.nfwd[c] = len(fwd) + len(back), len(fwd)
        self.conns[key] = c
        self.sports.append(conn.sport)
        return c

    def flows(self, conn: np.ndarray, payload: np.ndarray) -> dict:
        """The flows of messages of ``payload`` bytes on connections ``conn``: ``solver.Network.add``'s keywords
        but group and tag."""
        fwd, pk_fwd, back, pk_back, last = wire_bytes(payload, self.link.mtu)
        links, nlinks, nfwd = self.links[conn], self.nlinks[conn], self.nfwd[conn]
        coefs = np.ones(links.shape)
        # store-and-forward of the last packet on every link after the first, and every cable's delay
        lat = (nfwd - 1) * last * 8 / self.link.rate_bps + nfwd * CABLE_DELAY_S
        return {"links": links, "coefs": coefs, "nlinks": nlinks, "nfwd": nfwd, "nbytes": fwd.astype(np.float64),
                "lat": lat, "pkf": pk_fwd, "pkr": pk_back, "back": back.astype(np.float64)}


__all__ = ["Paths", "queues", "wire_bytes"]
