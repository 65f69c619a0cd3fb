"""Walks over forwarding tables: ``walk``, every path the tables allow between two NIC ports (``routing`` offers it
as its path query), and ``Walks``, the same for many NIC port pairs over one fabric's tables, each switch's walks
to a port computed once.

A write-up routes every pair of a run's rows (n=512: ~5,000 pairs a fabric, each ROFT pair ~50 ECMP walks over
~90 switch steps), and walks from a switch on to a destination are the same whoever sent to it: the second leaf
and the spines of ROFT's paths, the later switches of ZCube's. So the walks from each (switch, destination) are
kept, and a pair's list is its first switch's: the same walks in the same order as ``walk`` (its depth-first
order), so whatever is summed over them sums to the same floats. A broken table (a loop, a black hole, a wrong
delivery) is left to ``walk``, which names it.
"""

from __future__ import annotations

from typing import Mapping

from fabrics import addressing
from fabrics.topology import Fabric

Walk = tuple[tuple[str, ...], tuple[int, ...]]  # (switch hops, output ports)


def walk(
    fabric: Fabric, tables: Mapping[str, Mapping], src: tuple[int, int], dst: tuple[int, int]
) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
    """Every (switch hops, output ports) sequence the tables (``routing.ForwardingTables``) allow from NIC port
    ``src`` to NIC port ``dst``, depth first. Loops or black holes raise RuntimeError."""
    dst_ip = addressing.ip_of(*dst)
    target = addressing.host_name(dst[0])
    start = fabric.switch_of(*src)
    results: list[tuple[tuple[str, ...], tuple[int, ...]]] = []

    def step(switch: str, hops: tuple[str, ...], outs: tuple[int, ...]) -> None:
        if switch in hops:
            raise RuntimeError(f"forwarding loop towards {dst_ip}: {hops + (switch,)}")
        hop = tables[switch].get(dst_ip)
        if hop is None:
            raise RuntimeError(f"{switch} has no route to {dst_ip}")
        for port in hop.ports:
            peer, peer_port = fabric.peer(switch, port)
            if peer.startswith("gpu"):
                if (peer, peer_port) != (target, dst[1]):
                    raise RuntimeError(f"{switch} port {port} delivers {dst_ip} to {peer}:p{peer_port}")
                results.append((hops + (switch,), outs + (port,)))
            else:
                step(peer, hops + (switch,), outs + (port,))

    step(start, (), ())
    return results


class _Broken(Exception):
    """Something ``walk`` raises on: it is asked again, to say what."""


class Walks:
    """Remembered walks over ``tables`` (``routing.ForwardingTables``) of ``fabric``; one per fabric and tables."""

    def __init__(self, fabric: Fabric, tables) -> None:
        self.fabric, self.tables = fabric, tables
        self._from: dict[tuple[str, tuple[int, int]], list[Walk] | None] = {}  # None: being walked
        self._ways: dict[tuple[str, str], int] = {}
        self._longest: dict[tuple[str, tuple[int, int]], int | None] = {}  # None: being counted

    def __call__(self, src: tuple[int, int], dst: tuple[int, int]) -> list[Walk]:
        """``walk(fabric, tables, src, dst)``: the same list (shared: do not change it)."""
        start = self.fabric.switch_of(*src)
        try:
            return self._walks(start, dst, addressing.ip_of(*dst), addressing.host_name(dst[0]))
        except _Broken:
            self._from = {k: v for k, v in self._from.items() if v is not None}
            return walk(self.fabric, self.tables, src, dst)  # raises, naming what is broken

    def _walks(self, switch: str, dst: tuple[int, int], dst_ip: str, target: str) -> list[Walk]:
        key = (switch, dst)
        if key in self._from:
            got = self._from[key]
            if got is None:  # came back to a switch on the way: a loop
                raise _Broken
            return got
        self._from[key] = None
        out: list[Walk] = []
        for port, peer in self._steps(switch, dst, dst_ip, target):
            if peer is None:
                out.append(((switch,), (port,)))
            else:
                for hops, outs in self._walks(peer, dst, dst_ip, target):
                    if switch in hops:
                        raise _Broken
                    out.append(((switch,) + hops, (port,) + outs))
        self._from[key] = out
        return out

    def _steps(self, switch: str, dst: tuple[int, int], dst_ip: str, target: str) -> list[tuple[int, str | None]]:
        """(output port, the next switch, None where the port delivers to ``dst``) for each port ``switch``'s
        table sends ``dst_ip`` to, in the table's order; _Broken for a black hole or a wrong delivery."""
        hop = self.tables[switch].get(dst_ip)
        if hop is None:
            raise _Broken
        steps = []
        for port in hop.ports:
            peer, peer_port = self.fabric.peer(switch, port)
            if peer.startswith("gpu"):
                if (peer, peer_port) != (target, dst[1]):
                    raise _Broken
                steps.append((port, None))
            else:
                steps.append((port, peer))
        return steps

    def ways(self, switch: str, dst_ip: str) -> int:
        """How many ports ``switch`` spreads traffic to ``dst_ip`` over (its ECMP group's size)."""
        key = (switch, dst_ip)
        n = self._ways.get(key)
        if n is None:
            n = self._ways[key] = len(self.tables[switch][dst_ip].ports)
        return n

    def longest(self, src: tuple[int, int], dst: tuple[int, int]) -> int:
        """The most switches any walk from ``src`` to ``dst`` crosses (counted per switch, the walks not listed)."""
        try:
            return self._depth(self.fabric.switch_of(*src), dst, addressing.ip_of(*dst), addressing.host_name(dst[0]))
        except _Broken:
            self._longest = {k: v for k, v in self._longest.items() if v is not None}
            return max(len(hops) for hops, _ in self(src, dst))  # raises, naming what is broken

    def _depth(self, switch: str, dst: tuple[int, int], dst_ip: str, target: str) -> int:
        key = (switch, dst)
        if key in self._longest:
            got = self._longest[key]
            if got is None:  # a loop
                raise _Broken
            return got
        self._longest[key] = None
        deepest = 0
        for _, peer in self._steps(switch, dst, dst_ip, target):
            if peer is not None:
                deepest = max(deepest, self._depth(peer, dst, dst_ip, target))
        self._longest[key] = 1 + deepest
        return 1 + deepest


__all__ = ["walk", "Walks", "Walk"]
