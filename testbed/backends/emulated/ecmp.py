"""A repetition's ECMP outcome on the emulated fabric, recorded (``ecmp.json`` in its directory).

ROFT sends cross-rail traffic through a select group whose bucket (the spine) OVS picks by a hash of the
5-tuple; the agents' persistent connections draw their source ports from the repetition's hash seed
(``traffic.runtime.ports``), so the seed is the outcome's cause. After the run, with the fabric idle, each
connection whose route has more than one path is probed (``testbed.emulation.ecmp_probe``: one TCP RST with its
5-tuple, read off the switch egress queues' packet counters, ``qstats``) to learn the path OVS's hash gave it.

Each direction is probed apart: the data direction from the source's namespace, the reverse one (the
connection's ACKs and the agents' acks: OVS hashes the swapped 5-tuple on its own) from the destination's. The
ns-3 twin and the flow-level engine can then carry every connection on the paths recorded here
(``testbed.backends.paths.Recording``, the experiment key ``paths_from``).

``ecmp.json``::

  {"hash_seed", "hash_seed_given", "fabric", "connections": n, "multipath_connections": n, "multipath_directions": n
   (each direction of a multipath connection), "learnt": n (directions
   learnt, both counted), "probe_rounds", "probe_s", "ports_sha256" (a digest of every connection's source port:
   same digest, same lottery), "flows": [{"src": "gpu3:p1", "dst": "gpu17:p2", "sport", "dport", "path":
   ["leaf1:9", ...] or null (one path only, or not learnt), "reverse_path": the same for dst -> src}],
   "flows_per_switch_link": {"leaf1:9": n, ...} (connection directions whose learnt path leaves a switch towards
   another switch there), "flows_per_switch_link_max", "..._sha256"}
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from pathlib import Path

from fabrics import Fabric, addressing
from fabrics.routing import forwarding_tables, walk
from testbed.emulation import ecmp_probe

PROBE_WAIT_S = 0.02
MAX_ROUNDS = 400


class QueueProber(ecmp_probe.Prober):
    """``ecmp_probe.Prober`` reading the switch egress queues' packet counters (one netlink dump: a few ms) instead
    of OVS's port counters (a process per switch)."""

    def __init__(self, flows, candidates, reader) -> None:
        super().__init__(flows, candidates)
        self.reader = reader
        self.rounds = 0

    def _tx(self) -> dict[tuple[str, int], int]:
        out = {}
        for row in self.reader.read():
            sw, _, port = row["queue"].rpartition(":")
            if row["kind"] == "switch" and "packets" in row:
                out[(sw, int(port))] = row["packets"]
        return out

    def __call__(self, batch):
        self.rounds += 1
        before = self._tx()
        for k, cport in batch.items():
            src, dst, dport = self.flows[k]
            src_ip, dst_ip = addressing.ip_of(*src), addressing.ip_of(*dst)
            self.socks[src].sendto(ecmp_probe.rst_segment(src_ip, dst_ip, cport, dport), (dst_ip, 0))
        time.sleep(PROBE_WAIT_S)
        after = self._tx()
        return {k: ecmp_probe.which_path(self.candidates[k], before, after) for k in batch}


def _end(ip: str) -> tuple[int, int]:
    return addressing.parse_ip(ip)


REVERSE = "reverse"  # the key suffix of a connection's reverse direction among the probed flows


def outcome(fabric: Fabric, connections: list, learnt: dict, hash_seed: int, given: bool) -> dict:
    """The ecmp.json document from the connections (src ip, sport, dst ip, dport) and their learnt paths (keyed by
    the connection's tuple, and by (tuple, REVERSE) for its reverse direction)."""
    flows, per_link = [], Counter()

    def hops_of(path) -> list[str] | None:
        if path is None:
            return None
        for sw, p in zip(*path):
            if not fabric.peer(sw, p)[0].startswith("gpu"):
                per_link[f"{sw}:{p}"] += 1
        return [f"{sw}:{p}" for sw, p in zip(*path)]

    for c in connections:
        src_ip, sport, dst_ip, dport = c
        s, d = _end(src_ip), _end(dst_ip)
        flows.append({"src": f"gpu{s[0]}:p{s[1]}", "dst": f"gpu{d[0]}:p{d[1]}", "sport": sport, "dport": dport,
                      "path": hops_of(learnt.get(tuple(c))),
                      "reverse_path": hops_of(learnt.get((tuple(c), REVERSE)))})
    ports = "\n".join(f"{f['src']},{f['dst']}:{f['sport']}" for f in sorted(flows, key=lambda f: (f["src"], f["dst"],
                                                                                                f["sport"])))
    counts = "\n".join(f"{k}={v}" for k, v in sorted(per_link.items()))
    return {"hash_seed": hash_seed, "hash_seed_given": given, "fabric": fabric.kind, "connections": len(flows),
            "ports_sha256": hashlib.sha256(ports.encode()).hexdigest()[:16], "flows": flows,
            "flows_per_switch_link": dict(sorted(per_link.items())),
            "flows_per_switch_link_max": max(per_link.values(), default=0),
            "flows_per_switch_link_sha256": hashlib.sha256(counts.encode()).hexdigest()[:16]}


def record(st, connections: list, hash_seed: int, given: bool, run_dir: Path, log=print) -> dict:
    """Learn the path of each direction of every multipath connection on the idle fabric ``st`` and write
    ecmp.json."""
    from testbed.emulation import qstats

    fabric = st.model()
    tables = forwarding_tables(fabric)
    flows, candidates, ports = {}, {}, {}
    for c in connections:
        src_ip, sport, dst_ip, dport = c
        src, dst = _end(src_ip), _end(dst_ip)
        for key, a, b, a_port, b_port in ((tuple(c), src, dst, sport, dport),
                                          ((tuple(c), REVERSE), dst, src, dport, sport)):
            paths = walk(fabric, tables, a, b)
            if len(paths) > 1:  # a probe from a's port a_port to b's b_port
                flows[key], candidates[key], ports[key] = (a, b, b_port), paths, a_port
    t = time.monotonic()
    learnt: dict = {}
    rounds = 0
    if flows:
        reader = qstats.QueueReader(st.queues)
        prober = QueueProber(flows, candidates, reader)
        try:
            got = ecmp_probe.learn(candidates, prober, ports, max_rounds=MAX_ROUNDS)
            learnt = {k: path for k, (_, path) in got.items()}
            rounds = prober.rounds
        finally:
            prober.close()
            reader.close()
    doc = outcome(fabric, connections, learnt, hash_seed, given)
    multipath = sum(1 for k in flows if not (isinstance(k[1], str) and k[1] == REVERSE))
    doc |= {"multipath_connections": multipath, "multipath_directions": len(flows), "learnt": len(learnt),
            "probe_rounds": rounds,
            "probe_s": round(time.monotonic() - t, 2)}
    (run_dir / "ecmp.json").write_text(json.dumps(doc, indent=1) + "\n")
    if flows:
        log(f"ECMP: {len(learnt)} of {len(flows)} multipath directions' paths learnt in {doc['probe_s']:g} s "
            f"(hash seed {hash_seed}); at most {doc['flows_per_switch_link_max']} on one switch link")
    return doc
