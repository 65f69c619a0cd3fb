"""What crosses each link: KV and EP bytes per directed fabric link, from the fabric model.

The queues of ``links.csv`` say how many bytes each link carried, not whose they were. Every row of
``transfers.csv`` (KV-cache transfers) and ``messages.csv`` (expert-parallel dispatch and combine
messages) names its source and destination NIC port (``src_ip`` / ``dst_ip``, ``10.<port>.0.<gpu>``);
this module walks each one over the fabric model's forwarding tables (``fabrics.routing``,
what the controller installs) and adds its bytes to every link on the way: the sender's NIC queue,
then every switch egress port. A link is named as in ``links.csv``: queue ``gpu3:p1`` (a NIC port) or
``sw1:9`` / ``leaf2:11`` (switch, OpenFlow port), with ``towards`` the next hop.

* ZCube: once the two NIC ports are fixed the path is unique, so every byte is where the model puts
  it (share ``exact``).
* ROFT: a same-rail pair stays on its leaf (exact). A cross-rail pair goes up one of the leaf's
  uplinks and down one of the spine's cables to the destination leaf, picked by the switches' ECMP
  hash of the TCP 5-tuple, which the model cannot know (the agents keep one persistent connection
  per NIC port pair, so all of a pair's bytes take one of those paths). Its bytes are split evenly
  over the ECMP candidates: the expectation of the hash, and a link that got any such bytes is marked
  ``expected``. The two NIC links and the destination leaf's port down to the GPU stay exact.

Bytes are what the agents sent: the payload of a row, ``bytes`` when it was verified, else what
arrived (``received_bytes``); scaled emulated bytes, as in the CSVs (a row's NIC-queue bytes are its
``nics.csv`` sent bytes). ``links.csv`` counts wire bytes: Ethernet, IP and TCP headers (~66 B a
packet, ~2 % at MTU 3000), the agents' framing (a 24 B header per message, and the receiver's
per-message ack going the other way), the TCP ACKs of flows going the other way, retransmissions and
anything else on the link (cross traffic). So a link's model bytes do not add up to its measured
bytes; ``model_vs_measured`` (model bytes / links.csv bytes) shows how much of the measured load the
model accounts for: ~0.95 on a link carrying large messages one way, much less on one carrying
small messages (decode EP: a few hundred bytes each) or mostly the acks of the other direction. On an ``expected``
link it also shows the hash: bytes the hash put elsewhere, or there, move it below or above that.

Contributors: a KV row counts towards ``KV s<p> -> s<d>`` (its prefill server to its decode server:
the gathers between two servers), an EP row towards ``EP <engine> <dispatch|combine>``. Servers are
whole groups of ``gpus_per_server`` GPUs (``traffic.model.placement.gpu_server``, as the serving layout
places them). Pairs inside a server ride NVLink and are never put in these CSVs (the cluster model
drops same-server EP pairs and never places prefill and decode on one server); whatever a CSV holds
was on the emulated fabric, so every row is routed.

``testbed.repetition.writeup`` writes ``link_traffic.csv`` into every run directory with ``write_run``;
``for_run_dir`` computes the same table from a finished run directory alone.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from common.errors import TestbedError
from fabrics import addressing
from fabrics.routing import ForwardingTables, Link, forwarding_tables, path_links
from fabrics.topology import Fabric
from fabrics.walks import Walks
from traffic.model.placement import gpu_server
from traffic.runtime.records import sent_pair

COLUMNS = ("queue", "towards", "kv_bytes", "ep_bytes", "share", "top", "measured_bytes", "model_vs_measured")
FILE = "link_traffic.csv"
TOP_PER_CLASS = 2  # contributors listed per class (KV, EP) in ``top``


@dataclass
class LinkLoad:
    """The model's bytes on one directed link (one egress queue)."""

    queue: str  # "gpu3:p1" or "sw1:9", as links.csv
    towards: str  # "sw1", "gpu9:p2", ...
    kv_bytes: float = 0.0
    ep_bytes: float = 0.0
    expected: bool = False  # some of its bytes are an ECMP expectation, not a known path
    by_label: dict[str, float] = field(default_factory=dict)  # "KV s1 -> s3" / "EP prefill0 dispatch" -> bytes

    @property
    def bytes(self) -> float:
        return self.kv_bytes + self.ep_bytes

    @property
    def share(self) -> str:
        return "expected" if self.expected else "exact"

    def top(self, per_class: int = TOP_PER_CLASS) -> list[tuple[str, float]]:
        """The ``per_class`` biggest KV and EP contributors, biggest first."""
        ranked = sorted(self.by_label.items(), key=lambda kv: (-kv[1], kv[0]))
        out = [kv for kv in ranked if kv[0].startswith("KV ")][:per_class]
        out += [kv for kv in ranked if kv[0].startswith("EP ")][:per_class]
        return sorted(out, key=lambda kv: (-kv[1], kv[0]))

    def top_text(self, per_class: int = TOP_PER_CLASS) -> str:
        """``EP prefill0 dispatch 48%; KV s1 -> s3 12%`` (share of this link's model bytes)."""
        total = self.bytes
        if not total:
            return ""
        return "; ".join(f"{label} {_percent(b / total)}" for label, b in self.top(per_class) if b > 0)


def _percent(x: float) -> str:
    return "<1%" if x < 0.005 else f"{x:.0%}"


def queue_of(fabric: Fabric, link: Link) -> tuple[str, str]:
    """(queue, towards) of a model link, named as ``fabrics.datapath`` names the queues (links.csv)."""
    node, port = link
    if node.startswith("gpu"):
        return f"{node}:p{port}", fabric.switch_of(int(node[3:]), port)
    peer, peer_port = fabric.peer(node, port)
    return f"{node}:{port}", (f"{peer}:p{peer_port}" if peer.startswith("gpu") else peer)


def all_links(fabric: Fabric) -> dict[str, LinkLoad]:
    """An empty ``LinkLoad`` for every queue of the fabric: each NIC port, each switch port."""
    links = [(addressing.host_name(g), p) for g, p in sorted(fabric.attachment)]
    links += [(name, p) for name, sw in fabric.switches.items() for p in sorted(sw.ports)]
    out = {}
    for link in links:
        q, towards = queue_of(fabric, link)
        out[q] = LinkLoad(q, towards)
    return out


def is_kv(row: dict) -> bool:
    """KV rows have no kind (planned replay) or kind ``kv``; EP rows are dispatch or combine."""
    return row.get("kind") in (None, "", "kv")


def _number(value) -> float:
    if value is None or value == "":
        return 0.0
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _verified(value) -> bool:
    return value is True or str(value).strip().lower() in ("true", "1")


def row_bytes(row: dict) -> float:
    """The payload a row put on the fabric: ``bytes`` when verified, else what arrived."""
    return _number(row.get("bytes")) if _verified(row.get("verified")) else _number(row.get("received_bytes"))


def label_of(row: dict, src_gpu: int, dst_gpu: int, gpus_per_server: int) -> str:
    if is_kv(row):
        return f"KV s{gpu_server(src_gpu, gpus_per_server)} -> s{gpu_server(dst_gpu, gpus_per_server)}"
    engine = row.get("engine")
    return f"EP {engine} {row['kind']}" if engine not in (None, "") else f"EP {row['kind']}"


def link_traffic(fabric: Fabric, rows: Iterable[dict], gpus_per_server: int = 8,
                 tables: ForwardingTables | None = None) -> dict[str, LinkLoad]:
    """queue -> ``LinkLoad`` for every queue of ``fabric``, from merged rows (``transfers.csv`` and
    ``messages.csv`` rows, or ``traffic.runtime.records.merge_results``' dicts: ``src_ip``, ``dst_ip``,
    ``bytes``, ``received_bytes``, ``verified``, and for EP messages ``kind`` and ``engine``; a merged
    row the sender moved to the other port pair goes by its ``sent_src_ip``/``sent_dst_ip``). A row
    without both addresses (never in any plan) carries nothing. TestbedError when an address is not
    a NIC port of the fabric or the tables have no path for it."""
    tables = tables or forwarding_tables(fabric)
    loads = all_links(fabric)
    # aggregate first: (src port, dst port, KV?, label) -> bytes; then route each pair once
    per_pair: dict[tuple[str, str], dict[tuple[bool, str], float]] = {}
    for row in rows:
        src_ip, dst_ip = sent_pair(row)  # a transfer moved to the other port pair took that pair's path
        nbytes = row_bytes(row)
        if not src_ip or not dst_ip or nbytes <= 0:
            continue
        src, dst = addressing.parse_ip(str(src_ip)), addressing.parse_ip(str(dst_ip))
        key = (is_kv(row), label_of(row, src[0], dst[0], gpus_per_server))
        pair = per_pair.setdefault((str(src_ip), str(dst_ip)), {})
        pair[key] = pair.get(key, 0.0) + nbytes
    walks = Walks(fabric, tables)
    queue: dict[Link, LinkLoad] = {}
    for (src_ip, dst_ip), by_key in sorted(per_pair.items()):
        src, dst = addressing.parse_ip(src_ip), addressing.parse_ip(dst_ip)
        for gpu, port in (src, dst):
            if (gpu, port) not in fabric.attachment:
                raise TestbedError(f"{addressing.ip_of(gpu, port)} is not a NIC port of this fabric "
                                   f"({fabric.describe()})")
        for link, frac in path_links(fabric, src, dst, tables, walks).items():
            load = queue.get(link)
            if load is None:
                load = queue[link] = loads[queue_of(fabric, link)[0]]
            if abs(frac - 1.0) > 1e-9:  # not on every ECMP alternative: an expectation
                load.expected = True
            for (kv, label), nbytes in by_key.items():
                b = nbytes * frac
                if kv:
                    load.kv_bytes += b
                else:
                    load.ep_bytes += b
                load.by_label[label] = load.by_label.get(label, 0.0) + b
    return loads


def table(loads: dict[str, LinkLoad], measured: dict[str, float] | None = None,
          per_class: int = TOP_PER_CLASS) -> list[dict]:
    """Rows of ``link_traffic.csv`` (``COLUMNS``), in queue order; ``measured``: links.csv bytes per queue."""
    measured = measured or {}
    out = []
    for q in sorted(loads, key=_natural):
        load = loads[q]
        m = measured.get(q)
        ratio = round(load.bytes / m, 3) if m else None
        out.append({"queue": q, "towards": load.towards, "kv_bytes": round(load.kv_bytes),
                    "ep_bytes": round(load.ep_bytes), "share": load.share, "top": load.top_text(per_class),
                    "measured_bytes": None if m is None else int(m), "model_vs_measured": ratio})
    return out


def _natural(q: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", q))


def read_measured(path: Path) -> dict[str, float]:
    """links.csv: queue -> bytes ({} when the file is absent)."""
    if not Path(path).is_file():
        return {}
    with open(path, newline="") as fh:
        return {r["queue"]: _number(r.get("bytes")) for r in csv.DictReader(fh) if r.get("queue")}


def read_rows(run_dir: Path) -> list[dict]:
    """The rows of a run directory's transfers.csv and messages.csv (either may be absent)."""
    rows: list[dict] = []
    for name in ("transfers.csv", "messages.csv"):
        path = Path(run_dir) / name
        if path.is_file():
            with open(path, newline="") as fh:
                rows.extend(csv.DictReader(fh))
    return rows


def write_csv(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow(["" if r[c] is None else r[c] for c in COLUMNS])
    return Path(path)


def write_run(run_dir: Path, fabric: Fabric, rows: Iterable[dict], gpus_per_server: int = 8) -> Path:
    """``run_dir/link_traffic.csv`` from a replay's merged rows and the links.csv already in ``run_dir``."""
    run_dir = Path(run_dir)
    loads = link_traffic(fabric, rows, gpus_per_server)
    return write_csv(run_dir / FILE, table(loads, read_measured(run_dir / "links.csv")))


def for_run_dir(run_dir: Path, fabric: Fabric | None = None) -> list[dict]:
    """The ``link_traffic.csv`` rows of a finished run directory, from its own files: config.json (the
    fabric, unless given, and ``replay.gpus_per_server``), transfers.csv, messages.csv, links.csv."""
    from fabrics import build_fabric

    run_dir = Path(run_dir)
    try:
        config = json.loads((run_dir / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TestbedError(f"{run_dir / 'config.json'} is unreadable ({exc.__class__.__name__}): expected the "
                           "replay's config with its fabric") from None
    if fabric is None:
        fabric = build_fabric(**config["fabric"])
    gps = (config.get("replay") or {}).get("gpus_per_server") or 8
    return table(link_traffic(fabric, read_rows(run_dir), gps), read_measured(run_dir / "links.csv"))


def hottest(rows: list[dict], n: int = 6) -> list[dict]:
    """The ``n`` rows with the most measured bytes (model bytes where nothing was measured)."""
    def key(r: dict) -> float:
        return r["measured_bytes"] if r["measured_bytes"] is not None else r["kv_bytes"] + r["ep_bytes"]

    return sorted(rows, key=key, reverse=True)[:n]


__all__ = ["COLUMNS", "FILE", "LinkLoad", "link_traffic", "table", "write_run", "for_run_dir", "read_rows",
           "read_measured", "hottest", "queue_of", "all_links"]
