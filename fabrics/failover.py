"""Failures on the fabric model: what still forwards, and which NIC ports a transfer can use.

Pure (no I/O). A dead cable is named by either of its ends, as the model names links
(``routing.Link``): a switch's OpenFlow port ``("sw1", 9)`` or a NIC port ``("gpu3", 1)``;
a dead switch by its name (``Dead.of``).

* ROFT: each ECMP group keeps its live buckets (``live_buckets``). A leaf drops an uplink
  whose cable or spine is dead and, for destinations on leaf D, also the uplinks to a spine
  that lost every cable to D (no watch port on the leaf sees that); a spine drops its dead
  cables to D.
* ZCube with parallel odd-even cables: a destination's cable is a fast-failover group, the
  planned cable (``routing.zcube_cable``) first, then its siblings in cable order from there
  (``bucket_order``), so each dead cable's traffic moves to the next live sibling.
* ZCube with the unique path of a port pair gone (every cable of the odd-even pair, a NIC
  link, a switch): the hosts send over the other NIC port pair (``detour``,
  ``usable_ports``). The switches install no detour.

Why the other port pair and not a three-hop path through the other group (the switch graph
is bipartite, so avoiding the cable O(g)-E(h) takes three cables, O(g) -> E' -> O' -> E(h)):

1. Deadlock freedom. Every ZCube path crosses exactly one switch-to-switch cable, so no
   packet holds a fabric buffer while it waits for another fabric cable: the channel
   dependency graph has no cable-to-cable edge and PFC cannot deadlock, as with up-down
   routing in a Clos. A three-cable detour turns at a switch of each group; two detours
   around the same four switches in opposite directions close a cyclic buffer dependency.
   Ruling that out needs a fabric-wide turn restriction recomputed per failure set; the
   other port pair needs nothing.
2. Diameter and capacity. The other pair's path has two switches and one cable like every
   other path. A detour doubles the switch hops and puts its bytes on two more cables that
   carry their own pairs' traffic, so one failure would slow unrelated pairs.
3. It is what the endpoints do anyway. The two NIC ports are in different subnets
   (10.1/16, 10.2/16) and an RDMA queue pair is bound to one port; when its path fails the
   transfer engine resubmits on another NIC (Mooncake Transfer Engine, "Fault Handling":
   it finds another reachable path and resubmits to a different RDMA NIC). With BGP and
   one ASN per switch group (as RFC 7938 numbers a Clos tier), AS-path loop detection
   would reject the detour anyway.

For GPUs of different servers the two port pairs use different cables (O(g)-E(h) and
E(g)-O(h), E(g) != E(h)), so any one dead cable, NIC link or switch leaves one pair. Only
GPUs of one server on one odd switch share the cable; their traffic is NVLink's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from common.errors import TestbedError
from fabrics import addressing
from fabrics.routing import ForwardingTables, Link, NextHop, PortChoice, forwarding_tables, walk
from fabrics.topology import Fabric

PORT_PAIRS = ((1, 2), (2, 1))  # (src port, dst port) hosts can send on: they route by the destination's plane


def far_end(fabric: Fabric, end: Link) -> Link:
    """The far end of the cable at ``end``; TestbedError for an end the fabric does not have."""
    node, port = end
    if node.startswith("gpu") and node[3:].isdigit() and (int(node[3:]), port) in fabric.attachment:
        return fabric.attachment[(int(node[3:]), port)]
    if node in fabric.switches and port in fabric.switches[node].ports:
        return fabric.peer(node, port)
    raise TestbedError(f"{node}:{port} is not a cable end of {fabric.describe()}")


@dataclass(frozen=True)
class Dead:
    """What is down: ``ends`` holds both ends of every dead cable, ``switches`` the dead switches."""

    ends: frozenset[Link] = frozenset()
    switches: frozenset[str] = frozenset()

    @classmethod
    def of(cls, fabric: Fabric, links: Iterable[Link] = (), switches: Iterable[str] = ()) -> Dead:
        """Cables named by either end, and switches by name, checked against the fabric."""
        ends: set[Link] = set()
        for end in links:
            ends |= {tuple(end), far_end(fabric, tuple(end))}
        for s in switches:
            if s not in fabric.switches:
                raise TestbedError(f"{s} is not a switch of {fabric.describe()}")
        return cls(frozenset(ends), frozenset(switches))

    def port_up(self, fabric: Fabric, switch: str, port: int) -> bool:
        """A switch port can carry traffic: the switch, its cable and the node at the far end are alive."""
        if switch in self.switches or (switch, port) in self.ends:
            return False
        return fabric.peer(switch, port)[0] not in self.switches

    def nic_up(self, fabric: Fabric, gpu: int, port: int) -> bool:
        """A GPU's NIC port reaches its switch."""
        return ((addressing.host_name(gpu), port) not in self.ends
                and fabric.switch_of(gpu, port) not in self.switches)


NOTHING_DEAD = Dead()


def bucket_order(fabric: Fabric, switch: str, hop: NextHop) -> tuple[int, ...]:
    """The buckets of the group a next hop becomes, in order: an ECMP set as it is; on ZCube a cable with
    parallel siblings first, then the siblings in cable order from it (wrapping round); otherwise the one port
    (no group)."""
    if hop.is_ecmp or fabric.kind != "zcube":
        return hop.ports
    (port,) = hop.ports
    peer, _ = fabric.peer(switch, port)
    if peer.startswith("gpu"):
        return hop.ports
    cables = fabric.ports_towards(switch, peer)
    i = cables.index(port)
    return tuple(cables[i:] + cables[:i])


def _homes(fabric: Fabric) -> dict[str, str]:
    """Destination address -> the switch its NIC port hangs off."""
    return {addressing.ip_of(gpu, port): sw for (gpu, port), (sw, _) in fabric.attachment.items()}


def _live(fabric: Fabric, dead: Dead, switch: str, order: tuple[int, ...], home: str) -> tuple[int, ...]:
    """The ports of ``order`` that still lead to the destination's switch ``home``."""
    out = []
    for port in order:
        if not dead.port_up(fabric, switch, port):
            continue
        peer, _ = fabric.peer(switch, port)
        if (fabric.switches[switch].role == "leaf" and not peer.startswith("gpu") and peer != home
                and not any(dead.port_up(fabric, peer, q) for q in fabric.ports_towards(peer, home))):
            continue  # a spine that lost every cable to the destination's leaf
        out.append(port)
    return tuple(out)


def live_buckets(fabric: Fabric, dead: Dead, switch: str,
                 tables: ForwardingTables | None = None) -> dict[str, tuple[int, ...]]:
    """Destination address -> the live buckets of its group at ``switch``, in bucket order, for every
    destination whose next hop is a group (a ROFT ECMP set, a ZCube cable with parallel siblings)."""
    tables = tables or forwarding_tables(fabric)
    homes = _homes(fabric)
    out = {}
    for dst, hop in sorted(tables[switch].items()):
        order = bucket_order(fabric, switch, hop)
        if len(order) > 1:
            out[dst] = _live(fabric, dead, switch, order, homes[dst])
    return out


def live_tables(fabric: Fabric, dead: Dead, tables: ForwardingTables | None = None) -> ForwardingTables:
    """The forwarding tables as the switches forward with ``dead`` down: an ECMP set keeps its live buckets, a
    fast-failover group forwards on its first live bucket, a single port stays if it is up; a next hop with
    nothing live is ``NextHop(())`` (the packet is dropped there)."""
    tables = tables or forwarding_tables(fabric)
    homes = _homes(fabric)
    out: ForwardingTables = {}
    for switch, table in tables.items():
        out[switch] = {}
        for dst, hop in table.items():
            live = _live(fabric, dead, switch, bucket_order(fabric, switch, hop), homes[dst])
            out[switch][dst] = NextHop(live if hop.is_ecmp else live[:1])
    return out


def failover_tables(fabric: Fabric, tables: ForwardingTables | None = None) -> ForwardingTables:
    """Every port a switch may forward each destination on, planned or failed over: an ECMP set as it is, a
    ZCube cable with its parallel siblings (``bucket_order``). What pause accounting has to cover, since the
    switches fail over without asking anyone."""
    tables = tables or forwarding_tables(fabric)
    return {sw: {dst: NextHop(bucket_order(fabric, sw, hop)) for dst, hop in table.items()}
            for sw, table in tables.items()}


class Route(NamedTuple):
    """The NIC ports a transfer uses and the switches and output ports its packets take."""

    src_port: int
    dst_port: int
    hops: tuple[str, ...]
    outs: tuple[int, ...]


def _walks(fabric: Fabric, dead: Dead, live: ForwardingTables, src: tuple[int, int], dst: tuple[int, int]) -> list:
    """Every (hops, output ports) alternative from NIC port ``src`` to ``dst`` over the live tables."""
    if not (dead.nic_up(fabric, *src) and dead.nic_up(fabric, *dst)):
        return []
    try:
        return walk(fabric, live, src, dst)
    except RuntimeError:
        return []


def detour(fabric: Fabric, dead: Dead, src: tuple[int, int], dst: tuple[int, int],
           live: ForwardingTables | None = None) -> Route | None:
    """ZCube: where a transfer planned from NIC port ``src`` = (gpu, port) to ``dst`` goes with ``dead`` down.
    Its own port pair's path while that is alive (over a sibling cable if the planned one is dead), else the other
    NIC port pair's path; None when neither is alive. ``live``: ``live_tables(fabric, dead)``, when asking often."""
    if fabric.kind != "zcube":
        raise TestbedError(f"detour is ZCube's unique-path repair; {fabric.describe()} spreads by ECMP")
    live = live or live_tables(fabric, dead)
    for sp, dp in ((src[1], dst[1]), (3 - src[1], 3 - dst[1])):
        walks = _walks(fabric, dead, live, (src[0], sp), (dst[0], dp))
        if walks:
            (hops, outs), = walks  # ZCube: one path per port pair
            return Route(sp, dp, hops, outs)
    return None


def usable_ports(fabric: Fabric, dead: Dead, src_gpu: int, dst_gpu: int,
                 live: ForwardingTables | None = None) -> list[PortChoice]:
    """The port pairs (p1 -> dst p2, p2 -> dst p1) over which ``src_gpu`` still reaches ``dst_gpu`` with ``dead``
    down, sharing the bytes evenly; [] when none does. The hosts' port choice filters by it
    (``routing.select_ports(..., usable=)``, ``routing.plan_ports(..., usable=)``). ``live``:
    ``live_tables(fabric, dead)``, when asking for many pairs."""
    live = live or live_tables(fabric, dead)
    ok = [(sp, dp) for sp, dp in PORT_PAIRS if _walks(fabric, dead, live, (src_gpu, sp), (dst_gpu, dp))]
    return [PortChoice(sp, dp, 1 / len(ok)) for sp, dp in ok]


# --------------------------------------------------------------------------- fault targets

TARGET_FORMS = "'link sw1:9', 'link gpu3:p1', 'link sw1:9 sw5:3', 'switch sw3' or 'controller'"
UNDO = {"down": "up", "stop": "start"}  # a fault action and the one that clears it


@dataclass(frozen=True)
class Target:
    """What a fault takes down: a cable (both ends, switch side first where there is one), a switch, or the
    controller. ``text`` is the canonical spelling, as faults are logged and reported."""

    kind: str  # "link" | "switch" | "controller"
    ends: tuple[Link, ...] = ()
    switch: str = ""

    @property
    def text(self) -> str:
        if self.kind == "link":
            return "link " + " ".join(_end_text(e) for e in self.ends)
        return f"switch {self.switch}" if self.kind == "switch" else "controller"

    def cut_ends(self, fabric: Fabric) -> list[Link]:
        """One end of every cable this target takes down (a switch: all of its ports; the controller: none)."""
        if self.kind == "link":
            return [self.ends[0]]
        return [(self.switch, p) for p in sorted(fabric.switches[self.switch].ports)] if self.kind == "switch" else []

    def dead(self, fabric: Fabric) -> Dead:
        """What this target being down means for forwarding (the controller being down means nothing)."""
        if self.kind == "link":
            return Dead.of(fabric, links=self.ends[:1])
        return Dead.of(fabric, switches=[self.switch]) if self.kind == "switch" else NOTHING_DEAD


def _end_text(end: Link) -> str:
    node, port = end
    return f"{node}:p{port}" if node.startswith("gpu") else f"{node}:{port}"


def _parse_end(fabric: Fabric, text: str) -> Link:
    """``sw1:9``, ``sw1-eth9``, ``gpu3:p1``, ``gpu3:1`` or ``gpu3-p1`` -> (node, port); one line naming what
    exists otherwise."""
    node, sep, port = text.replace("-eth", ":").replace("-p", ":p").partition(":")
    port = port[1:] if node.startswith("gpu") and port.startswith("p") else port
    if not sep or not port.isdigit():
        raise TestbedError(f"cable end {text!r}: expected a switch port like sw1:9 or a NIC port like gpu3:p1")
    end = (node, int(port))
    if node.startswith("gpu"):
        gpus = sorted(fabric.gpus())
        if not node[3:].isdigit() or int(node[3:]) not in gpus or end[1] not in (1, 2):
            raise TestbedError(f"cable end {text!r}: {fabric.describe()} has NIC ports gpu{gpus[0]}..gpu{gpus[-1]} "
                               "with ports p1 and p2")
        return end
    if node not in fabric.switches:
        raise TestbedError(f"cable end {text!r}: {node!r} is not a switch; switches: {', '.join(fabric.switches)}")
    ports = sorted(fabric.switches[node].ports)
    if end[1] not in ports:
        raise TestbedError(f"cable end {text!r}: {node} has ports {ports[0]}..{ports[-1]}")
    return end


def parse_target(fabric: Fabric, text: str) -> Target:
    """A fault target as the CLI and experiment files spell it (``TARGET_FORMS``); TestbedError in one line
    naming what is wrong and what exists."""
    words = text.split()
    kind = words[0] if words else ""
    if kind == "controller" and len(words) == 1:
        return Target("controller")
    if kind == "switch" and len(words) == 2:
        if words[1] not in fabric.switches:
            raise TestbedError(f"fault target {text!r}: no switch {words[1]!r}; switches: {', '.join(fabric.switches)}")
        return Target("switch", switch=words[1])
    if kind == "link" and len(words) in (2, 3):
        ends = [_parse_end(fabric, w) for w in words[1:]]
        far = far_end(fabric, ends[0])
        if len(ends) == 2 and ends[1] != far:
            raise TestbedError(f"fault target {text!r}: {words[1]} is cabled to {_end_text(far)}, not {words[2]}")
        first, second = sorted((ends[0], far), key=lambda e: (e[0].startswith("gpu"), e))
        return Target("link", ends=(first, second))
    raise TestbedError(f"fault target {text!r}: expected {TARGET_FORMS}")
