"""Forwarding tables, port-selection policies and the path query.

The tables here are abstract (destination address -> output port, or ECMP
group of ports); the controller turns them into OpenFlow rules and the path
query walks them, so what the tests check is what gets installed.

ZCube: every destination port is reached from the opposite switch group over
one direct odd-even link, so from any switch of the other group the shortest
path is unique; with parallel cables the cable is picked by destination
(``zcube_cable``). A destination in the same group is not on any policy's path
(hosts send across planes, see ``addressing``); the tables still reach it
over one fixed transit switch (the destination GPU's own switch of the other
group) so a manual ping works.

ROFT: a destination on this leaf goes out its host port; any other goes up
through an ECMP group over every uplink (all spines, all parallel cables),
and a spine forwards to the destination's leaf through an ECMP group over its
parallel cables. Real switches hash the 5-tuple; ``ecmp_bucket`` is the
model's hash (CRC-32 of the 5-tuple), used by analysis to predict collisions.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from testbed.errors import TestbedError
from testbed.fabric import addressing
from testbed.fabric.topology import Fabric


@dataclass(frozen=True)
class NextHop:
    """Output ports for one destination; more than one means an ECMP select group."""

    ports: tuple[int, ...]

    @property
    def is_ecmp(self) -> bool:
        return len(self.ports) > 1


# switch name -> destination IPv4 -> next hop
ForwardingTables = dict[str, dict[str, NextHop]]


# ----------------------------------------------------------------- policies
POLICIES = {
    "striped": "both NIC ports: half the bytes p1->dst p2, half p2->dst p1 (default; "
    "uses the whole dual-port NIC, each half on its unique path)",
    "rail-out": "always p1 -> destination p2 (leave on the multi-rail switch, arrive on "
    "the destination's single-rail switch)",
    "server-out": "always p2 -> destination p1",
    "pair-hash": "one of the two cross-plane paths, chosen by a hash of (src, dst)",
}
DEFAULT_POLICY = "striped"


@dataclass(frozen=True)
class PortChoice:
    src_port: int
    dst_port: int
    share: float  # fraction of the transfer's bytes


def select_ports(src_gpu: int, dst_gpu: int, policy: str = DEFAULT_POLICY) -> list[PortChoice]:
    """Which NIC ports a transfer from ``src_gpu`` to ``dst_gpu`` uses.

    The seed's structure implies cross-plane pairs: port 1 (odd group) talks to
    port 2 (even group) and back, each pair having one two-hop path in ZCube.
    Hosts route by destination plane, so choosing the destination address is
    choosing the source port too.
    """
    if policy == "striped":
        return [PortChoice(1, 2, 0.5), PortChoice(2, 1, 0.5)]
    if policy == "rail-out":
        return [PortChoice(1, 2, 1.0)]
    if policy == "server-out":
        return [PortChoice(2, 1, 1.0)]
    if policy == "pair-hash":
        h = zlib.crc32(f"{src_gpu}>{dst_gpu}".encode()) & 1
        return [PortChoice(1, 2, 1.0)] if h == 0 else [PortChoice(2, 1, 1.0)]
    raise TestbedError(f"port policy {policy!r} is unknown: expected one of {', '.join(POLICIES)}")


def egress_port_for(dst_port: int) -> int:
    """The host's route: destinations on plane 2 leave on port 1 and vice versa."""
    return 1 if dst_port == 2 else 2


# ------------------------------------------------------------------- tables
def forwarding_tables(fabric: Fabric) -> ForwardingTables:
    if fabric.kind == "zcube":
        return _zcube_tables(fabric)
    if fabric.kind in ("roft", "railonly"):
        return _roft_tables(fabric)
    raise TestbedError(f"fabric kind {fabric.kind!r} has no routing")


def zcube_cable(f: Fabric, gpu: int, n_cables: int) -> int:
    """Which of the parallel odd-even cables carries traffic to ``gpu``.

    The GPUs of one switch that are reached from one switch of the other group
    are k/(n/k) = cables apart in local rank ((gpu-1) mod k) // (n/k), so this
    gives each of them its own cable when the fabric is non-blocking.
    """
    k = f.params["gpus_per_switch"]
    groups = f.n_gpus // k
    return ((gpu - 1) % k) // groups % n_cables


def _zcube_tables(f: Fabric) -> ForwardingTables:
    tables: ForwardingTables = {name: {} for name in f.switches}
    for (gpu, port), (home, home_port) in sorted(f.attachment.items()):
        dst = addressing.ip_of(gpu, port)
        # the destination GPU's switch in the other group: transit for same-group sources
        transit = f.switch_of(gpu, 2 if port == 1 else 1)
        home_role = f.switches[home].role
        for name, sw in f.switches.items():
            if name == home:
                hop = home_port
            elif sw.role != home_role:
                cables = f.ports_towards(name, home)
                hop = cables[zcube_cable(f, gpu, len(cables))]
            else:
                cables = f.ports_towards(name, transit)
                hop = cables[zcube_cable(f, gpu, len(cables))]
            tables[name][dst] = NextHop((hop,))
    return tables


def _roft_tables(f: Fabric) -> ForwardingTables:
    tables: ForwardingTables = {name: {} for name in f.switches}
    uplinks = {
        name: tuple(sorted(p for p, (peer, _) in sw.ports.items() if peer.startswith("spine")))
        for name, sw in f.switches.items()
        if sw.role == "leaf"
    }
    for (gpu, port), (home, home_port) in sorted(f.attachment.items()):
        dst = addressing.ip_of(gpu, port)
        for name, sw in f.switches.items():
            if name == home:
                tables[name][dst] = NextHop((home_port,))
            elif sw.role == "leaf":
                if uplinks[name]:
                    tables[name][dst] = NextHop(uplinks[name])
            else:  # spine
                tables[name][dst] = NextHop(tuple(f.ports_towards(name, home)))
    return tables


def ecmp_bucket(five_tuple: tuple, n_buckets: int) -> int:
    """The model's ECMP hash: CRC-32 of the 5-tuple, modulo the group size."""
    key = "|".join(str(x) for x in five_tuple).encode()
    return zlib.crc32(key) % n_buckets


# --------------------------------------------------------------- path query
@dataclass(frozen=True)
class Path:
    src_port: int
    dst_port: int
    hops: tuple[str, ...]  # switches in order
    ecmp: bool  # one of several equal-cost alternatives
    cables: int = 1  # parallel cables that realise this same hop sequence


def walk(
    fabric: Fabric, tables: ForwardingTables, src: tuple[int, int], dst: tuple[int, int]
) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
    """Every (switch hops, output ports) sequence the tables allow from NIC port
    ``src`` to NIC port ``dst``. Loops or black holes raise RuntimeError."""
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


def paths(
    fabric: Fabric,
    src_gpu: int,
    dst_gpu: int,
    policy: str = DEFAULT_POLICY,
    tables: ForwardingTables | None = None,
) -> list[Path]:
    """The switch paths a transfer from ``src_gpu`` to ``dst_gpu`` can take."""
    for name, gpu in (("src", src_gpu), ("dst", dst_gpu)):
        if not 1 <= gpu <= fabric.n_gpus:
            raise TestbedError(f"{name}={gpu} is not a GPU of this fabric: expected 1..{fabric.n_gpus}")
    tables = tables or forwarding_tables(fabric)
    out: list[Path] = []
    for choice in select_ports(src_gpu, dst_gpu, policy):
        src = (src_gpu, choice.src_port)
        dst = (dst_gpu, choice.dst_port)
        try:
            walks = walk(fabric, tables, src, dst)
        except RuntimeError as exc:
            raise TestbedError(f"no path from gpu{src_gpu}:p{src[1]} to gpu{dst_gpu}:p{dst[1]}: {exc}") from None
        counts: dict[tuple[str, ...], int] = {}
        for hops, _ in walks:
            counts[hops] = counts.get(hops, 0) + 1
        for hops, n in counts.items():
            out.append(Path(choice.src_port, choice.dst_port, hops, len(counts) > 1, n))
    return out
