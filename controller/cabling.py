"""Cabling check: is every switch-to-switch cable where the plan says?

A probe frame sent out of one switch port names its sender (dpid, port); the
switch at the far end punts it to the controller (its probe rule), so each
received probe confirms one cable end. Plain data, no OpenFlow library.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from controller.rules import PROBE_DST_MAC, PROBE_ETHERTYPE
from fabrics import Fabric

PROBE_FMT = "!QI"  # sender dpid, sender OpenFlow port
PROBE_SRC_MAC = "02:ff:00:00:00:01"


def mac_bytes(mac: str) -> bytes:
    """'02:ff:..' as the 6 bytes of a frame header."""
    return bytes(int(x, 16) for x in mac.split(":"))


def probe_frame(dpid: int, port: int) -> bytes:
    """Ethernet frame naming its sender switch and port, padded to 60 bytes."""
    head = mac_bytes(PROBE_DST_MAC) + mac_bytes(PROBE_SRC_MAC) + struct.pack("!H", PROBE_ETHERTYPE)
    body = struct.pack(PROBE_FMT, dpid, port)
    return (head + body).ljust(60, b"\0")


def parse_probe(data: bytes) -> tuple[int, int] | None:
    """(sender dpid, sender port) of a probe frame, None for anything else."""
    if len(data) < 26 or struct.unpack("!H", data[12:14])[0] != PROBE_ETHERTYPE:
        return None
    return struct.unpack(PROBE_FMT, data[14:26])


def port_name(switch: str, port: int) -> str:
    """The name status reports use for a switch port (the OVS interface name)."""
    return f"{switch}-eth{port}"


class CablingCheck:
    """Which switch each switch-to-switch port reaches, as probes report it, against the plan."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.by_dpid = {sw.dpid: name for name, sw in fabric.switches.items()}
        self.expected = {port_name(name, port): peer for name, sw in fabric.switches.items()
                         for port, (peer, _) in sw.ports.items() if not peer.startswith("gpu")}
        self.seen: dict[str, str] = {}  # "sw1-eth9" -> receiving switch
        self.probes_sent = False

    def probes(self, switch: str) -> Iterator[tuple[int, bytes]]:
        """(port, frame) for every switch-to-switch port of ``switch``."""
        dpid = self.fabric.switches[switch].dpid
        for port, (peer, _) in self.fabric.switches[switch].ports.items():
            if not peer.startswith("gpu"):
                yield port, probe_frame(dpid, port)

    def received(self, receiver_dpid: int, data: bytes) -> None:
        """Record a punted frame if it is a probe between two switches of this fabric."""
        probe = parse_probe(data)
        if probe is None:
            return
        sender_dpid, sender_port = probe
        sender, receiver = self.by_dpid.get(sender_dpid), self.by_dpid.get(receiver_dpid)
        if sender and receiver:
            self.seen[port_name(sender, sender_port)] = receiver

    def result(self) -> dict:
        """The status file's cabling entry: counts, and every port not (yet) seen where planned."""
        wrong = {p: {"expected": e, "found": self.seen.get(p)} for p, e in sorted(self.expected.items())
                 if self.seen.get(p) != e}
        return {"probes_sent": self.probes_sent, "expected": len(self.expected),
                "confirmed": len(self.expected) - len(wrong), "wrong": wrong}
