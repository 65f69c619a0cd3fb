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

Port choice per transfer (``plan_ports``): how the replay's plan assigns NIC
ports to each transfer slice, including the ``adaptive`` policy, which needs
the fabric model's paths (``path_links``); ``link_loads`` adds up the bytes
each link carries under a plan.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, NamedTuple, Sequence

from common.errors import TestbedError
from fabrics import addressing
from fabrics.topology import Fabric
from fabrics.walks import Walks, walk  # walk: the path query, here where its callers look for it


@dataclass(frozen=True)
class NextHop:
    """Output ports for one destination; more than one means an ECMP select group."""

    ports: tuple[int, ...]

    @property
    def is_ecmp(self) -> bool:
        return len(self.ports) > 1


# switch name -> destination IPv4 -> next hop
ForwardingTables = dict[str, Mapping[str, NextHop]]


class SwitchTable(Mapping):
    """One switch's forwarding table, each next hop computed from the routing rule when it is read, not stored:
    every switch x every NIC address is 8.4M entries at n = 16,384. Reads as the dict it stands for: the same
    destinations in the same order ((gpu, port) order), the same next hops."""

    def __init__(self, fabric: Fabric, hop: Callable[[int, int], NextHop],
                 own: Sequence[tuple[int, int]] | None = None) -> None:
        """``hop(gpu, port)``: the next hop towards that NIC port; ``own``: the only destinations the switch has
        a route to (a rail-only leaf's own NIC ports), None for every NIC port of the fabric. Holds the fabric's
        address index, not the fabric (a table cached beside a fabric must not keep it alive)."""
        self._hop, self._index = hop, fabric.nic_of_ip
        self._own = None if own is None else frozenset(own)
        self._keys = fabric.nic_ips if own is None else tuple(kv for kv in fabric.nic_ips if kv[1] in self._own)

    def __getitem__(self, dst_ip: str) -> NextHop:
        nic = self._index.get(dst_ip)
        if nic is None or (self._own is not None and nic not in self._own):
            raise KeyError(dst_ip)
        return self._hop(*nic)

    def __iter__(self) -> Iterator[str]:
        return (ip for ip, _ in self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def items(self):
        return [(ip, self._hop(*nic)) for ip, nic in self._keys]

    def __repr__(self) -> str:
        return f"SwitchTable({len(self)} destinations)"


# ----------------------------------------------------------------- policies
POLICIES = {
    "striped": "both NIC ports: half the bytes p1->dst p2, half p2->dst p1 (default; "
    "uses the whole dual-port NIC, each half on its unique path)",
    "rail-out": "always p1 -> destination p2 (leave on the multi-rail switch, arrive on "
    "the destination's single-rail switch)",
    "server-out": "always p2 -> destination p1",
    "pair-hash": "one of the two cross-plane paths, chosen by a hash of (src, dst)",
    "adaptive": "per transfer, the port pair whose path carries the fewest bytes this sender still has "
    "outstanding at the transfer's start (plan-time model); ties: striped order, offset by the sender's GPU",
}
DEFAULT_POLICY = "striped"


@dataclass(frozen=True)
class PortChoice:
    src_port: int
    dst_port: int
    share: float  # fraction of the transfer's bytes


def select_ports(src_gpu: int, dst_gpu: int, policy: str = DEFAULT_POLICY,
                 usable: Sequence[PortChoice] | None = None) -> list[PortChoice]:
    """Which NIC ports a transfer from ``src_gpu`` to ``dst_gpu`` uses.

    The seed's structure implies cross-plane pairs: port 1 (odd group) talks to
    port 2 (even group) and back, each pair having one two-hop path in ZCube.
    Hosts route by destination plane, so choosing the destination address is
    choosing the source port too. ``adaptive`` depends on what the sender has
    outstanding, so it is decided per transfer by ``plan_ports``; here it gives
    the choice of a sender with nothing outstanding. ``usable``: the port pairs
    that still reach the destination (``failover.usable_ports``); the policy's
    choices are cut to them (``restrict``).
    """
    choices = _policy_ports(src_gpu, dst_gpu, policy)
    return choices if usable is None else restrict(choices, usable, src_gpu, dst_gpu)


def restrict(choices: Sequence[PortChoice], usable: Sequence[PortChoice], src_gpu: int,
             dst_gpu: int) -> list[PortChoice]:
    """A policy's choices cut to the usable port pairs: those whose pair is usable, their shares scaled to add up
    to 1; when none is, the usable pairs (a dead path's detour is the other NIC port pair). None usable:
    TestbedError (the two GPUs cannot reach each other over the fabric)."""
    pairs = {(u.src_port, u.dst_port) for u in usable}
    kept = [c for c in choices if (c.src_port, c.dst_port) in pairs]
    if not kept:
        kept = list(usable)
    total = sum(c.share for c in kept)
    if not kept or total <= 0:
        raise TestbedError(f"no usable NIC port pair from gpu{src_gpu} to gpu{dst_gpu}: both paths are down")
    return [PortChoice(c.src_port, c.dst_port, c.share / total) for c in kept]


def _policy_ports(src_gpu: int, dst_gpu: int, policy: str) -> list[PortChoice]:
    """``select_ports`` of a fabric with nothing down."""
    if policy == "striped":
        return [PortChoice(1, 2, 0.5), PortChoice(2, 1, 0.5)]
    if policy == "rail-out":
        return [PortChoice(1, 2, 1.0)]
    if policy == "server-out":
        return [PortChoice(2, 1, 1.0)]
    if policy == "pair-hash":
        h = zlib.crc32(f"{src_gpu}>{dst_gpu}".encode()) & 1
        return [PortChoice(1, 2, 1.0)] if h == 0 else [PortChoice(2, 1, 1.0)]
    if policy == "adaptive":
        # one transfer from an idle sender (what ``path`` shows): the first of the tie order
        return [_tie_order(src_gpu, 0)[0]]
    raise TestbedError(f"port policy {policy!r} is unknown: expected one of {', '.join(POLICIES)}")


def port_pairs(src_gpu: int, dst_gpu: int, policy: str = DEFAULT_POLICY) -> tuple[tuple[int, int], ...]:
    """The (source port, destination port) pairs the messages of a GPU pair take in turn, in the policy's order:
    the serving cluster's senders (the emulator's coordinator, the twin, the ideal network) alternate over them;
    ``adaptive`` chooses among striped's by the sender's backlog. A rule asked per pair, not a table of every
    pair (268M of them at n = 16,384)."""
    static = "striped" if policy == "adaptive" else policy
    return tuple((c.src_port, c.dst_port) for c in select_ports(src_gpu, dst_gpu, static))


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


def zcube_cable(gpu: int, k: int, groups: int, n_cables: int) -> int:
    """Which of the parallel odd-even cables carries traffic to ``gpu`` in a ZCube of k GPUs per switch and
    ``groups`` (n/k) switches per group.

    The GPUs of one switch that are reached from one switch of the other group
    are k/(n/k) = cables apart in local rank ((gpu-1) mod k) // (n/k), so this
    gives each of them its own cable when the fabric is non-blocking.
    """
    return ((gpu - 1) % k) // groups % n_cables


def _one_port_hops() -> Callable[[int], NextHop]:
    """NextHop((port,)) for a port, one object per port (a table read millions of times allocates nothing)."""
    made: dict[int, NextHop] = {}

    def one(port: int) -> NextHop:
        hop = made.get(port)
        if hop is None:
            hop = made[port] = NextHop((port,))
        return hop

    return one


def _zcube_tables(f: Fabric) -> ForwardingTables:
    """From a switch of the other group the destination port's switch is one cable away (the cable by
    ``zcube_cable``); from its own switch it is a host port; from another switch of its group it goes through
    the destination GPU's switch of the other group (the transit)."""
    one = _one_port_hops()
    role = {name: sw.role for name, sw in f.switches.items()}
    attachment, k = f.attachment, f.params["gpus_per_switch"]
    groups = f.n_gpus // k

    def table(name: str) -> SwitchTable:
        towards = f._ports_by_peer[name]

        def hop(gpu: int, port: int) -> NextHop:
            home, home_port = attachment[(gpu, port)]
            if name == home:
                return one(home_port)
            via = home if role[name] != role[home] else attachment[(gpu, 3 - port)][0]
            cables = towards[via]
            return one(cables[zcube_cable(gpu, k, groups, len(cables))])

        return SwitchTable(f, hop)

    return {name: table(name) for name in f.switches}


def _roft_tables(f: Fabric) -> ForwardingTables:
    """A destination on this leaf: its host port; on another leaf: up an ECMP group over every uplink (none on a
    rail-only leaf: no route); at a spine: down an ECMP group over its cables to the destination's leaf."""
    one = _one_port_hops()
    attachment = f.attachment

    def table(name: str) -> SwitchTable:
        towards = f._ports_by_peer[name]
        if f.switches[name].role == "spine":
            down = {peer: NextHop(ports) for peer, ports in towards.items()}
            return SwitchTable(f, lambda gpu, port: down[attachment[(gpu, port)][0]])
        uplinks = NextHop(tuple(sorted(p for peer, ports in towards.items() if peer.startswith("spine")
                                       for p in ports)))

        def hop(gpu: int, port: int) -> NextHop:
            home, home_port = attachment[(gpu, port)]
            return one(home_port) if home == name else uplinks

        mine = None if uplinks.ports else [nic for nic, (home, _) in attachment.items() if home == name]
        return SwitchTable(f, hop, mine)

    return {name: table(name) for name in f.switches}


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



def links_on_path(fabric: Fabric, src: tuple[int, int], dst: tuple[int, int],
                  tables: ForwardingTables | None = None, walks: Walks | None = None) -> int:
    """How many links a packet from NIC port ``src`` = (gpu, port) to NIC port ``dst`` crosses: its NIC's,
    then one per switch it leaves (the longest of its ECMP alternatives). ``walks``: remembered walks over
    ``tables`` (many pairs)."""
    try:
        if walks is not None:
            return 1 + walks.longest(src, dst)
        found = walk(fabric, tables or forwarding_tables(fabric), src, dst)
    except RuntimeError as exc:
        raise TestbedError(f"no path from gpu{src[0]}:p{src[1]} to gpu{dst[0]}:p{dst[1]}: {exc}") from None
    return 1 + max(len(hops) for hops, _ in found)

# ------------------------------------------------------- port choice per transfer
Link = tuple[str, int]  # a transmitter: (GPU name, NIC port) or (switch name, OpenFlow output port)


class Send(NamedTuple):
    """One planned transfer (a slice of a KV transfer): bytes, and when it is scheduled to start."""

    src_gpu: int
    dst_gpu: int
    bytes: float
    start_s: float


_STRIPED_ORDER = (PortChoice(1, 2, 1.0), PortChoice(2, 1, 1.0))


def _tie_order(src_gpu: int, k: int) -> list[PortChoice]:
    """The adaptive policy's preference among equally loaded choices: the striped
    order of the pair's k-th transfer (p1 -> dst p2 first when k is even), shifted
    by one for even GPUs, so the senders of a gather (consecutive TP ranks) do not
    all start on the same destination port."""
    first = (k + src_gpu - 1) % 2
    return [_STRIPED_ORDER[first], _STRIPED_ORDER[1 - first]]


def path_links(
    fabric: Fabric, src: tuple[int, int], dst: tuple[int, int], tables: ForwardingTables | None = None,
    walks: Walks | None = None,
) -> dict[Link, float]:
    """The links a transfer from NIC port ``src`` = (gpu, port) to ``dst`` crosses,
    each with the fraction of its bytes it carries: the sender's NIC port, then
    every switch output port along the way. On ZCube's unique path every fraction
    is 1; at a ROFT ECMP hop the bytes split evenly over the group's ports (the
    model's expectation of the hash, which picks one of them per flow). ``walks``: remembered walks over
    ``tables`` (many pairs)."""
    tables = walks.tables if walks is not None else tables or forwarding_tables(fabric)
    dst_ip = addressing.ip_of(*dst)
    try:
        found = walks(src, dst) if walks is not None else walk(fabric, tables, src, dst)
    except RuntimeError as exc:
        raise TestbedError(f"no path from gpu{src[0]}:p{src[1]} to gpu{dst[0]}:p{dst[1]}: {exc}") from None
    ways = walks.ways if walks is not None else (lambda switch, ip: len(tables[switch][ip].ports))
    out: dict[Link, float] = {(addressing.host_name(src[0]), src[1]): 1.0}
    for hops, outs in found:
        share = 1.0
        for switch in hops:
            share /= ways(switch, dst_ip)
        for link in zip(hops, outs):
            out[link] = out.get(link, 0.0) + share
    return out


def _certain_links(fabric: Fabric, src: tuple[int, int], dst: tuple[int, int], tables: ForwardingTables) -> list[Link]:
    """The links every ECMP alternative crosses: all of them on ZCube; on ROFT the
    two NIC links (the hash, out of the sender's hands, picks the rest)."""
    walks = walk(fabric, tables, src, dst)
    common = set(zip(walks[0][0], walks[0][1]))
    for hops, outs in walks[1:]:
        common &= set(zip(hops, outs))
    return [(addressing.host_name(src[0]), src[1])] + sorted(common)


def plan_ports(
    transfers: Sequence[Send | tuple],
    policy: str = DEFAULT_POLICY,
    fabric: Fabric | None = None,
    rate_bps: float | None = None,
    tables: ForwardingTables | None = None,
    usable: Callable[[int, int], Sequence[PortChoice]] | None = None,
) -> list[PortChoice]:
    """The NIC ports of each transfer, as the replay's plan sends it (one choice
    with share 1 per transfer, in the order given; ``transfers`` are ``Send`` or
    (src_gpu, dst_gpu, bytes, start_s) tuples).

    ``usable(src_gpu, dst_gpu)``: the port pairs that still reach the destination
    (``failover.usable_ports``); every policy chooses among those only, so a
    transfer whose pair is down takes the other NIC port pair. With failures,
    ``tables`` should be ``failover.live_tables`` (the paths as the switches now
    forward them) for ``adaptive``.

    ``striped``: the k-th transfer of a (src, dst) pair takes p1 -> dst p2 when k
    is even and p2 -> dst p1 when odd (the halves of ``select_ports`` become
    alternate slices). ``rail-out``, ``server-out``, ``pair-hash``: their one
    choice. ``adaptive`` (needs ``fabric`` and the link rate ``rate_bps``, at
    which every link runs; bytes are the plan's bytes):

    Transfers are taken by start time (ties in the order given). Each sender
    keeps, per link, the time until which its own planned bytes occupy it: a
    transfer of b bytes starting at t begins when every link of its path has
    sent this sender's earlier bytes and ends b x 8 / rate later, and the path's
    links are busy until then (the agents send a port pair's slices one after
    the other on one connection). The sender's outstanding bytes on a link at t
    are (busy until - t) x rate / 8. A transfer takes the choice whose path has
    (1) the fewest outstanding bytes on its most loaded link (the earliest ideal
    finish), then (2) the fewest summed over its links (the path sharing least
    with the sender's backlog, e.g. not the cable and destination port its last
    transfer is still on), then (3) the striped order, shifted by one for even
    GPUs so the senders of a gather (consecutive TP ranks) split over the
    destination's two ports instead of all taking the same one.

    Why load and not a hash: ROFT's static mapping piles asymmetric KV
    transfers onto a few links (the seed's observation), and a static choice,
    hashed or striped, cannot see what a port already carries. A transfer
    engine that spreads slices over its NICs by load decides this way: Mooncake
    Transfer Engine's TENT ``DeviceSelector`` gives each slice the NIC with the
    lowest (in-flight bytes + slice bytes) / bandwidth (kvcache-ai/Mooncake,
    mooncake-transfer-engine/tent/src/transport/rdma/quota.cpp; the original
    engine picks a random preferred NIC per 64 KB slice, src/topology.cpp
    ``Topology::selectDevice``). Like it, the rule sees only the sender's own
    bytes, not other senders': on ZCube a sender's most loaded link is always
    its own NIC port, so the path enters through (2), and a cable that several
    senders' choices share stays as loaded as under ``striped``'s halves.

    On ZCube the port pair fixes the whole path. On ROFT both NIC ports hang off
    the rail's leaf and the spine is picked by the switches' ECMP hash, out of
    our hands: the rule only picks the NIC ports, and counts only the links
    every ECMP alternative shares, the two NIC links.
    """
    sends = [Send(*t) for t in transfers]
    pair_count: dict[tuple[int, int], int] = {}
    if policy != "adaptive":
        out = []
        for s in sends:
            k = pair_count.get((s.src_gpu, s.dst_gpu), 0)
            pair_count[(s.src_gpu, s.dst_gpu)] = k + 1
            choices = select_ports(s.src_gpu, s.dst_gpu, policy, usable(s.src_gpu, s.dst_gpu) if usable else None)
            c = choices[k % len(choices)]
            out.append(PortChoice(c.src_port, c.dst_port, 1.0))
        return out
    if fabric is None or rate_bps is None or not rate_bps > 0:
        raise TestbedError("port policy 'adaptive' needs the fabric model and a positive link rate: it chooses by "
                           "the bytes each path carries")
    tables = tables or forwarding_tables(fabric)
    links_of: dict[tuple[int, int, int, int], list[Link]] = {}
    busy: dict[tuple[int, Link], float] = {}  # (sender, link) -> time its planned bytes there are sent
    picks: list[PortChoice | None] = [None] * len(sends)
    for i in sorted(range(len(sends)), key=lambda j: (sends[j].start_s, j)):
        s = sends[i]
        k = pair_count.get((s.src_gpu, s.dst_gpu), 0)
        pair_count[(s.src_gpu, s.dst_gpu)] = k + 1
        candidates = _tie_order(s.src_gpu, k)
        if usable is not None:
            pairs = {(u.src_port, u.dst_port) for u in usable(s.src_gpu, s.dst_gpu)}
            candidates = [c for c in candidates if (c.src_port, c.dst_port) in pairs]
            if not candidates:
                raise TestbedError(f"no usable NIC port pair from gpu{s.src_gpu} to gpu{s.dst_gpu}: both paths are "
                                   "down")
        best = None
        for rank, c in enumerate(candidates):
            key4 = (s.src_gpu, c.src_port, s.dst_gpu, c.dst_port)
            if key4 not in links_of:
                try:
                    links_of[key4] = _certain_links(fabric, (s.src_gpu, c.src_port), (s.dst_gpu, c.dst_port), tables)
                except RuntimeError as exc:
                    raise TestbedError(f"no path from gpu{s.src_gpu}:p{c.src_port} to gpu{s.dst_gpu}:p{c.dst_port}: "
                                       f"{exc}") from None
            backlog = [max(0.0, busy.get((s.src_gpu, link), s.start_s) - s.start_s) * rate_bps / 8
                       for link in links_of[key4]]
            score = (round(max(backlog), 3), round(sum(backlog), 3), rank)
            if best is None or score < best[0]:
                best = (score, c, links_of[key4])
        _, choice, links = best
        begin = max([s.start_s] + [busy.get((s.src_gpu, link), s.start_s) for link in links])
        end = begin + s.bytes * 8 / rate_bps
        for link in links:
            busy[(s.src_gpu, link)] = end
        picks[i] = choice
    return picks


def link_loads(
    fabric: Fabric,
    transfers: Sequence[Send | tuple],
    choices: Sequence[PortChoice | Sequence[PortChoice]],
    tables: ForwardingTables | None = None,
) -> dict[Link, float]:
    """Bytes each link carries when transfer i is sent as ``choices[i]`` (one
    ``PortChoice``, e.g. from ``plan_ports``, or a list of them with their shares,
    e.g. ``select_ports``): bytes x share x the link's fraction of the path."""
    tables = tables or forwarding_tables(fabric)
    loads: dict[Link, float] = {}
    for t, chosen in zip(transfers, choices, strict=True):
        s = Send(*t)
        for c in [chosen] if isinstance(chosen, PortChoice) else chosen:
            for link, frac in path_links(fabric, (s.src_gpu, c.src_port), (s.dst_gpu, c.dst_port), tables).items():
                loads[link] = loads.get(link, 0.0) + s.bytes * c.share * frac
    return loads


def link_name(fabric: Fabric, link: Link) -> str:
    """``gpu3:p1->sw5`` (a NIC port), ``sw2->sw1#0`` (a switch's cable to another
    switch, with its index among the parallel cables), ``sw1->gpu17:p1``."""
    node, port = link
    if node.startswith("gpu"):
        return f"{node}:p{port}->{fabric.switch_of(int(node[3:]), port)}"
    peer, peer_port = fabric.peer(node, port)
    if peer.startswith("gpu"):
        return f"{node}->{peer}:p{peer_port}"
    return f"{node}->{peer}#{fabric.ports_towards(node, peer).index(port)}"
