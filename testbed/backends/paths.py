"""Which path each persistent connection takes, one rule for every engine that routes by itself (the ns-3 twin,
the flow-level engine), so that two engines given the same seed carry the same connections on the same paths.

A connection joins two NIC ports (src gpu, port) -> (dst gpu, port). Its source port is drawn from the hash seed by
the emulator's own rule (``traffic.runtime.ports.source_port``); its destination port is the agents' listening
port. Its path, each direction apart (data one way, ACKs and the agents' acks the other): at every switch the
model's forwarding table, an ECMP group's member (ROFT's spines) by the model's hash
(``fabrics.routing.ecmp_bucket``, CRC-32 of the 5-tuple and the switch).

Open vSwitch hashes the same 5-tuple its own way, so the model's hash and the emulator's give two different ROFT
path sets from one seed. A ``Recording`` (an emulator repetition's ``ecmp.json``: every connection it opened, its
source port and the path OVS gave each direction, learnt by probing) replaces the hash: the engine then routes
every recorded connection exactly as the emulator did. A connection the recording lacks (the engine used a NIC port
pair the emulator never did) or whose path was not learnt falls back to the model's hash, and is counted
(``PathBook.outcome``: ``hashed_multipath``), so a run says how much of it followed the recording.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from common.errors import TestbedError
from fabrics import Fabric, addressing
from fabrics.routing import ForwardingTables, ecmp_bucket, forwarding_tables, walk
from traffic.runtime.launcher import AGENT_PORT as LISTEN_PORT  # every connection's destination port, as the agents'
from traffic.runtime.ports import source_port

RECORDING = "ecmp.json"  # an emulator repetition's recorded paths, in its directory

Hops = tuple[tuple[str, int], ...]  # (switch, output port) from the source's switch to the destination's
End = tuple[int, int]  # (gpu, NIC port)


def route(fabric: Fabric, tables: ForwardingTables, src: End, dst: End, sport: int, dport: int) -> Hops:
    """The hops of the flow from NIC port ``src`` to ``dst`` with these TCP ports: the model's table at each switch,
    an ECMP group's member by the model's hash."""
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
            return tuple(hops)
        if len(hops) > len(fabric.switches):
            raise RuntimeError(f"forwarding loop towards {dst_ip}: {hops}")
        switch = peer


def _end(name: str) -> End:
    """'gpu3:p1' -> (3, 1)."""
    gpu, _, port = name.partition(":p")
    return int(gpu[3:]), int(port)


def _hops(names) -> Hops | None:
    """['leaf1:9', 'spine2:3', ...] -> ((leaf1, 9), ...); None stays None."""
    if names is None:
        return None
    out = []
    for h in names:
        sw, _, port = str(h).rpartition(":")
        out.append((sw, int(port)))
    return tuple(out)


@dataclass(frozen=True)
class Recorded:
    """One connection as the emulator opened it: its source port and the path OVS gave each direction (None: not
    learnt, or one path only)."""

    sport: int
    forward: Hops | None
    reverse: Hops | None


@dataclass(frozen=True)
class Recording:
    """An emulator repetition's connections and their paths (``ecmp.json``), checked against a fabric model."""

    source: str  # the file it came from
    fabric_kind: str
    hash_seed: int | None
    connections: dict[tuple[End, End], Recorded]  # the first connection opened per NIC port pair

    @classmethod
    def load(cls, path: Path, fabric: Fabric) -> "Recording":
        """Read ``path`` (an ecmp.json) and check it was recorded on a fabric wired as ``fabric``: the same kind,
        and every recorded path one of the model's own paths for its pair (another n, k or wiring fails here).
        A TestbedError names what does not match."""
        path = Path(path)
        try:
            doc = json.loads(path.read_text())
            flows = doc["flows"]
        except (OSError, ValueError, KeyError, TypeError):
            raise TestbedError(f"{path}: not an emulator repetition's ecmp.json (no 'flows')", key="paths_from") \
                from None
        if doc.get("fabric") != fabric.kind:
            raise TestbedError(f"{path} was recorded on {doc.get('fabric')!r}: expected a {fabric.kind} recording",
                               key="paths_from")
        tables = forwarding_tables(fabric)
        conns: dict[tuple[End, End], Recorded] = {}
        for f in flows:
            try:
                src, dst = _end(f["src"]), _end(f["dst"])
                rec = Recorded(int(f["sport"]), _hops(f.get("path")), _hops(f.get("reverse_path")))
                dport = int(f["dport"])
            except (KeyError, ValueError, TypeError):
                raise TestbedError(f"{path}: a flow without src, dst, sport and dport: {f}", key="paths_from") \
                    from None
            if dport != LISTEN_PORT:
                raise TestbedError(f"{path}: a connection to port {dport}: expected the agents' port {LISTEN_PORT}",
                                   key="paths_from")
            for a, b, hops in ((src, dst, rec.forward), (dst, src, rec.reverse)):
                if hops is not None and not _is_model_path(fabric, tables, a, b, hops):
                    raise TestbedError(f"{path}: the recorded path {_name(a)} -> {_name(b)} "
                                       f"({', '.join(f'{s}:{p}' for s, p in hops)}) is not a path of this "
                                       f"{fabric.describe()}: expected a recording of the same fabric",
                                       key="paths_from")
            conns.setdefault((src, dst), rec)
        return cls(str(path), fabric.kind, doc.get("hash_seed"), conns)


def _name(end: End) -> str:
    return f"gpu{end[0]}:p{end[1]}"


def _is_model_path(fabric: Fabric, tables: ForwardingTables, src: End, dst: End, hops: Hops) -> bool:
    if src[0] not in fabric.gpus() or dst[0] not in fabric.gpus():
        return False
    try:
        paths = walk(fabric, tables, src, dst)
    except (RuntimeError, KeyError):
        return False
    return any(tuple(zip(sws, outs)) == hops for sws, outs in paths)


@dataclass(frozen=True)
class Connection:
    """A connection's TCP ports and the hops of each direction."""

    sport: int
    dport: int
    forward: Hops  # src -> dst (data)
    reverse: Hops  # dst -> src (ACKs, the agents' acks)
    recorded: bool  # both directions' paths came from a recording


@dataclass
class PathBook:
    """Every connection an engine opens, routed once: from the recording where it has the connection, else by the
    source-port rule and the model's hash. ``seed``: the hash seed (the repetition's seed, or the conditions'
    ``hash_seed``)."""

    fabric: Fabric
    seed: int
    recording: Recording | None = None
    tables: ForwardingTables | None = None
    opened: dict[tuple[End, End], Connection] = field(default_factory=dict)
    used_ports: set = field(default_factory=set)
    link_flows: Counter = field(default_factory=Counter)  # (switch, port) to another switch -> directions routed
    hashed_multipath: int = 0  # directions with several paths routed by the model's hash despite a recording

    def __post_init__(self) -> None:
        if self.tables is None:
            self.tables = forwarding_tables(self.fabric)

    def connection(self, src: End, dst: End) -> Connection:
        """The connection between two NIC ports, opened (its source port drawn, its paths fixed) on first use."""
        key = (src, dst)
        c = self.opened.get(key)
        if c is not None:
            return c
        rec = self.recording.connections.get(key) if self.recording is not None else None
        src_ip, dst_ip = addressing.ip_of(*src), addressing.ip_of(*dst)
        dport = LISTEN_PORT
        if rec is not None:
            sport = rec.sport
            self.used_ports.add((src_ip, sport))
        else:
            sport = source_port(self.seed, src_ip, dst_ip, self.used_ports)
        forward = rec.forward if rec is not None and rec.forward is not None else None
        reverse = rec.reverse if rec is not None and rec.reverse is not None else None
        if forward is None:
            forward = route(self.fabric, self.tables, src, dst, sport, dport)
            self._count_hashed(src, dst)
        if reverse is None:
            reverse = route(self.fabric, self.tables, dst, src, dport, sport)
            self._count_hashed(dst, src)
        for hops in (forward, reverse):
            for switch, port in hops:
                if not self.fabric.peer(switch, port)[0].startswith("gpu"):
                    self.link_flows[(switch, port)] += 1
        c = Connection(sport, dport, forward, reverse, forward is not None and rec is not None
                       and rec.forward is not None and rec.reverse is not None)
        self.opened[key] = c
        return c

    def _count_hashed(self, src: End, dst: End) -> None:
        if self.recording is not None and len(walk(self.fabric, self.tables, src, dst)) > 1:
            self.hashed_multipath += 1

    def outcome(self) -> dict:
        """Which ECMP outcome the run had: the hash seed, whether paths came from a recording (and how many
        multipath directions did not), the connections opened, a digest of their source ports (same digest, same
        lottery) and the directions routed on each switch-to-switch link (the most and the mean per link, and a
        digest of the per-link counts)."""
        ports = "\n".join(f"{s[0]},{s[1]},{d[0]},{d[1]}:{c.sport}" for (s, d), c in sorted(self.opened.items()))
        counts = "\n".join(f"{sw}:{p}={n}" for (sw, p), n in sorted(self.link_flows.items()))
        per_link = list(self.link_flows.values())
        return {"hash_seed": self.seed, "recorded_from": self.recording.source if self.recording else None,
                "hashed_multipath": self.hashed_multipath if self.recording else None,
                "connections": len(self.opened),
                "ports_sha256": hashlib.sha256(ports.encode()).hexdigest()[:16],
                "switch_links_with_flows": len(per_link), "flows_per_switch_link_max": max(per_link, default=0),
                "flows_per_switch_link_mean": round(sum(per_link) / len(per_link), 3) if per_link else 0.0,
                "flows_per_switch_link_sha256": hashlib.sha256(counts.encode()).hexdigest()[:16]}
