"""Learn which ECMP path OVS's hash gives a TCP 5-tuple, and pick 5-tuples
that spread a permutation over ROFT's core without collisions.

Why: with a random hash, some of a permutation's flows share a spine link.
Their max-min share is known once the paths are learnt, but TCP over a
drop-tail queue does not split a shared link max-min fairly, so the per-flow
ratio then measures TCP, not the emulator. Choosing client ports whose hashed
paths are disjoint (what a traffic engineer pinning flows does) gives every
flow the full link rate as its ideal, the same test ZCube gets by construction.

How: a probe is one TCP RST with the flow's 5-tuple, sent from a raw socket in
the source GPU's namespace (a RST to a closed port gets no answer, so nothing
travels back to blur the counters). OVS's per-port transmit counters show
which candidate path counted it. Flows whose candidate ports do not overlap
are probed in the same round.
"""

from __future__ import annotations

import random
import socket
import struct
import subprocess
import time
from collections import Counter
from typing import Callable, Hashable, Iterable

from fabrics import addressing
from fabrics.datapath import netns_of
from traffic.runtime import netns

Path = tuple[tuple[str, ...], tuple[int, ...]]  # (switch hops, output ports), as routing.walk gives


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def rst_segment(src_ip: str, dst_ip: str, sport: int, dport: int) -> bytes:
    """A 20-byte TCP header with RST set and a correct checksum."""
    header = struct.pack("!HHIIBBHHH", sport, dport, random.getrandbits(32), 0, 5 << 4, 0x04, 0, 0, 0)
    pseudo = socket.inet_aton(src_ip) + socket.inet_aton(dst_ip) + struct.pack("!BBH", 0, socket.IPPROTO_TCP, 20)
    return header[:16] + struct.pack("!H", checksum(pseudo + header)) + header[18:]


def path_links(src: tuple[int, int], path: Path) -> list[str]:
    """A path in the link names ``maxmin`` uses: the NIC, then every switch egress port."""
    hops, outs = path
    return [f"gpu{src[0]}:p{src[1]}"] + [f"{sw}:{p}" for sw, p in zip(hops, outs)]


def which_path(candidates: list[Path], before: dict, after: dict) -> Path | None:
    """The one candidate whose every output port counted the probe (None if not exactly one)."""
    hit = [c for c in candidates
           if all(after.get((sw, p), 0) > before.get((sw, p), 0) for sw, p in zip(*c))]
    return hit[0] if len(hit) == 1 else None


def _candidate_ports(candidates: dict[Hashable, list[Path]]) -> dict[Hashable, set[tuple[str, int]]]:
    """Every (switch, output port) any candidate path of a flow uses."""
    return {k: {(sw, p) for hops, outs in c for sw, p in zip(hops, outs)} for k, c in candidates.items()}


def _disjoint(cand_ports: dict[Hashable, set], todo: list[Hashable]) -> list[Hashable]:
    """Flows of ``todo``, in order, whose candidate ports overlap none taken
    before them: probed together, their counters cannot be confused."""
    batch, taken = [], set()
    for k in todo:
        if not cand_ports[k] & taken:
            batch.append(k)
            taken |= cand_ports[k]
    return batch


def spread(candidates: dict[Hashable, list[Path]], probe: Callable[[dict[Hashable, int]], dict[Hashable, Path | None]],
           ports: Iterable[int], max_rounds: int = 150) -> tuple[dict[Hashable, tuple[int, Path]], int]:
    """Greedy: each round, probe a fresh client port for every unplaced flow
    whose candidate ports overlap no other probed flow's; keep it if its path
    shares no switch port with a placed flow. Returns ({flow: (port, path)},
    rounds used); flows left unplaced after ``max_rounds`` are missing."""
    cand_ports = _candidate_ports(candidates)
    fresh = iter(ports)
    used: Counter = Counter()
    placed: dict[Hashable, tuple[int, Path]] = {}
    rounds = 0
    while len(placed) < len(candidates) and rounds < max_rounds:
        rounds += 1
        batch = {k: next(fresh) for k in _disjoint(cand_ports, [k for k in candidates if k not in placed])}
        for k, path in probe(batch).items():
            if path is None:
                continue
            links = list(zip(*path))
            if not any(used[link] for link in links):
                placed[k] = (batch[k], path)
                used.update(links)
    return placed, rounds


def learn(candidates: dict[Hashable, list[Path]], probe: Callable[[dict[Hashable, int]], dict[Hashable, Path | None]],
          ports: dict[Hashable, int], max_rounds: int = 30) -> dict[Hashable, tuple[int, Path]]:
    """The path each flow's own client port hashes to, collisions allowed
    (flows whose candidate ports overlap go in different rounds)."""
    cand_ports = _candidate_ports(candidates)
    learnt: dict[Hashable, tuple[int, Path]] = {}
    for _ in range(max_rounds):
        batch = {k: ports[k] for k in _disjoint(cand_ports, [k for k in candidates if k not in learnt])}
        if not batch:
            break
        learnt.update({k: (ports[k], path) for k, path in probe(batch).items() if path is not None})
    return learnt


def port_tx(switches) -> dict[tuple[str, int], int]:
    """OVS's per-port transmit packet counters, all switches read at once."""
    import re

    procs = {sw: subprocess.Popen(["ovs-ofctl", "-O", "OpenFlow13", "--no-names", "dump-ports", sw],
                                  stdout=subprocess.PIPE, text=True) for sw in switches}
    out = {}
    for sw, proc in procs.items():
        text = proc.communicate()[0]
        for port, tx in re.findall(r"port\s+(\d+):.*?tx pkts=(\d+)", text, re.S):
            out[(sw, int(port))] = int(tx)
    return out


class Prober:
    """Sends RST probes from the GPUs' namespaces and reads which path each took."""

    def __init__(self, flows: dict[Hashable, tuple[tuple[int, int], tuple[int, int], int]],
                 candidates: dict[Hashable, list[Path]]) -> None:
        self.flows, self.candidates = flows, candidates
        self.socks: dict[tuple[int, int], socket.socket] = {}
        for src, _, _ in flows.values():
            if src not in self.socks:
                with netns.inside(netns_of(src[0])):
                    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
                s.bind((addressing.ip_of(*src), 0))
                self.socks[src] = s

    def __call__(self, batch: dict[Hashable, int]) -> dict[Hashable, Path | None]:
        switches = sorted({sw for k in batch for hops, _ in self.candidates[k] for sw in hops})
        before = port_tx(switches)
        for k, cport in batch.items():
            src, dst, dport = self.flows[k]
            src_ip, dst_ip = addressing.ip_of(*src), addressing.ip_of(*dst)
            self.socks[src].sendto(rst_segment(src_ip, dst_ip, cport, dport), (dst_ip, 0))
        time.sleep(0.05)
        after = port_tx(switches)
        return {k: which_path(self.candidates[k], before, after) for k in batch}

    def close(self) -> None:
        for s in self.socks.values():
            s.close()
