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

import numba as nb
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
    return _wire(np.asarray(payload, dtype=np.int64), scale.payload_bytes(mtu), wire.HEADER.size, scale.HEADER_BYTES,
                 wire.ACK.size)


@nb.njit(cache=True)
def _wire(payload, mss, header, per_packet, ack):
    """``wire_bytes`` compiled (called once per phase: numpy's per-call cost was most of it)."""
    m = len(payload)
    fwd, pk_fwd, back = np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64)
    pk_back, last = np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64)
    for i in range(m):
        p = payload[i]
        pk_fwd[i] = 1 + -(-p // mss)  # the frame header's packet, then the payload's
        fwd[i] = p + header + per_packet * pk_fwd[i]
        acks = pk_fwd[i] // 2  # delayed ACKs, one per two segments
        back[i] = ack + per_packet * (1 + acks)
        pk_back[i] = 1 + acks
        last[i] = (p - 1) % mss + 1 + per_packet
    return fwd, pk_fwd, back, pk_back, last


@nb.njit(cache=True)
def _flows(conn, payload, conn_links, conn_nlinks, conn_nfwd, mss, header, per_packet, ack, rate_bps, cable_s):
    """``Paths.flows``'s arrays in one compiled call."""
    fwd, pk_fwd, back, pk_back, last = _wire(payload, mss, header, per_packet, ack)
    m, width = len(conn), conn_links.shape[1]
    links, coefs = np.empty((m, width), dtype=np.int64), np.ones((m, width))
    nlinks, nfwd, lat = np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64), np.empty(m)
    for i in range(m):
        c = conn[i]
        links[i] = conn_links[c]
        nlinks[i], nfwd[i] = conn_nlinks[c], conn_nfwd[c]
        # store-and-forward of the last packet on every link after the first, and every cable's delay
        lat[i] = (nfwd[i] - 1) * last[i] * 8 / rate_bps + nfwd[i] * cable_s
    return links, coefs, nlinks, nfwd, fwd.astype(np.float64), lat, pk_fwd, pk_back, back.astype(np.float64)


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
        links, coefs, nlinks, nfwd, nbytes, lat, pkf, pkr, back = _flows(
            np.asarray(conn, dtype=np.int64), np.asarray(payload, dtype=np.int64), self.links, self.nlinks, self.nfwd,
            scale.payload_bytes(self.link.mtu), wire.HEADER.size, scale.HEADER_BYTES, wire.ACK.size,
            float(self.link.rate_bps), float(CABLE_DELAY_S))
        return {"links": links, "coefs": coefs, "nlinks": nlinks, "nfwd": nfwd, "nbytes": nbytes, "lat": lat,
                "pkf": pkf, "pkr": pkr, "back": back}


__all__ = ["Paths", "queues", "wire_bytes"]
