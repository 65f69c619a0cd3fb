"""``bench pfc --hosts``: the PFC incast over a fabric spread over several hosts (issue 26).

The one-host bench (``testbed.bench.pfc``) drives iperf3 inside the fabric's namespaces; over hosts the
traffic goes where ``run --hosts`` sends it: planned transfer rows (the planned driver's format,
``traffic.runtime.records.PLAN_KEYS``) carried by the agents of every host
(``MultiHostBackend.carry``). The incast: ``senders`` GPUs, at least half of them on another host than
the victim when the placement has that many, send back-to-back transfers into the victim GPU's port for
``seconds``; together they offer ``load`` times what the victim's link carries, so its last-hop queue
stays over XOFF and pauses spread upstream, over cables inside a host and cables between hosts.

PFC is on: the figures are the pause and resume latencies, split into pauses whose transmitter and
cause sit on the same host ("local") and on different hosts ("cross", a PFC frame through a tunnel),
as ``pfcstats.split_latencies`` defines them, next to the pauses and resumes of the merged pfc.txt,
the queue drops, the transfers verified and the hosts' clock offsets. The PFC-off half of the one-host
bench (the drops without PFC) is not run over hosts: ``--pfc off --hosts`` is refused.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from common.errors import TestbedError

TRANSFER_BYTES = 200_000  # a few hundred KB: many transfers per sender, each many full packets
LOAD = 2.0  # the senders together offer this many times the victim link's rate


def _check_victim(fabric, victim: tuple[int, int]) -> None:
    gpus = list(fabric.gpus())
    ok = isinstance(victim, tuple) and len(victim) == 2 and victim[0] in gpus and victim[1] in (1, 2)
    if not ok:
        raise TestbedError(f"incast victim {_name(victim)} is not a GPU port of {fabric.describe()}: expected "
                           f"gpu{min(gpus)} .. gpu{max(gpus)}, port 1 or 2")


def _name(victim) -> str:
    try:
        return f"gpu{victim[0]}:p{victim[1]}"
    except (TypeError, IndexError):
        return repr(victim)


def _round_robin(fabric, pool: list[int], port: int) -> list[int]:
    """``pool`` in an order that takes its GPUs round robin over the switches of their ``port``."""
    groups: dict[str, list[int]] = {}
    for g in pool:
        groups.setdefault(fabric.switch_of(g, port), []).append(g)
    return [grp[i] for i in range(max(map(len, groups.values()), default=0)) for grp in groups.values()
            if i < len(grp)]


def incast_senders(placement, victim: tuple[int, int], count: int) -> list[int]:
    """``count`` GPUs other than the victim: ceil(count / 2) on other hosts than the victim's (all of them
    if fewer), the rest on the victim's host (more from other hosts if it has too few); each group taken
    round robin over the switches of their sending port. Sorted."""
    fabric = placement.fabric
    _check_victim(fabric, victim)
    others = [g for g in fabric.gpus() if g != victim[0]]
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= len(others):
        raise TestbedError(f"incast senders {count} is out of range: expected 1 .. {len(others)}")
    home = placement.gpu_host[victim[0]]
    port = 3 - victim[1]
    remote = _round_robin(fabric, [g for g in others if placement.gpu_host[g] != home], port)
    local = _round_robin(fabric, [g for g in others if placement.gpu_host[g] == home], port)
    n_remote = min(len(remote), max(math.ceil(count / 2), count - len(local)))
    return sorted(remote[:n_remote] + local[:count - n_remote])


def incast_rows(fabric, senders: list[int], victim: tuple[int, int], seconds: float, rate_bps: float,
                load: float = LOAD, transfer_bytes: int = TRANSFER_BYTES) -> list[dict]:
    """Plan rows: every sender's NIC port with the victim's other port number sends transfers of
    ``transfer_bytes`` into the victim's port, evenly spaced over ``seconds`` (each sender's start
    staggered by a share of the spacing), so that together they offer ``load`` x ``rate_bps``."""
    from fabrics import addressing
    from traffic.runtime.launcher import AGENT_PORT

    _check_victim(fabric, victim)
    gpus = set(fabric.gpus())
    bad = [g for g in senders if g not in gpus or g == victim[0]]
    if not senders or bad or len(set(senders)) != len(senders):
        what = f"gpu{bad[0]}" if bad else ("none" if not senders else "a GPU twice")
        raise TestbedError(f"incast sender {what} is not allowed: expected distinct GPUs of {fabric.describe()} "
                           f"other than the victim gpu{victim[0]}")
    if not seconds > 0:
        raise TestbedError(f"incast duration {seconds} s is not allowed: expected more than 0 s")
    if not (rate_bps > 0 and load > 0 and transfer_bytes > 0):
        raise TestbedError(f"incast rate {rate_bps} bit/s, load {load}, transfer {transfer_bytes} B: expected "
                           "each more than 0")
    per_sender = load * rate_bps / 8 * seconds / len(senders)  # bytes each sender offers
    n = max(1, math.ceil(per_sender / transfer_bytes))
    gap = seconds / n
    port = 3 - victim[1]
    rows = []
    for i, g in enumerate(sorted(senders)):
        offset = gap * i / len(senders)
        for k in range(n):
            rows.append({"id": len(rows), "request_id": i, "src": f"gpu{g}", "dst": f"gpu{victim[0]}",
                         "src_ip": addressing.ip_of(g, port), "dst_ip": addressing.ip_of(*victim),
                         "dst_port": AGENT_PORT, "bytes": int(transfer_bytes), "start": round(offset + k * gap, 6)})
    return rows


def refuse_pfc_off(pfc) -> None:
    if pfc is None or not pfc.enabled:
        raise TestbedError("bench pfc --hosts runs the incast with PFC on only: for the drops with PFC off, run "
                           "'testbed bench pfc' without --hosts")


def count_events(path: Path) -> dict:
    """Pauses and resumes of a (merged) pfc.txt, and the queues paused."""
    from pfc import analysis

    events = analysis.read_events(path) if path.exists() else []
    return {"pauses": sum(1 for e in events if e.event == 1), "resumes": sum(1 for e in events if e.event == 0),
            "queues_paused": len({e.queue for e in events if e.event == 1})}


def bench(hosts_file: str, fabric_args: dict, config, pfc, senders: int = 8, seconds: float = 16,
          victim: tuple[int, int] = (1, 2), tunnel: str = "vxlan", log=print, out: Path | None = None,
          load: float = LOAD, transfer_bytes: int = TRANSFER_BYTES) -> dict:
    """The planned incast over the hosts of ``hosts_file`` with PFC on; the figures (see the module)."""
    refuse_pfc_off(pfc)
    from testbed.backends.base import Conditions, FabricSpec, PlannedTraffic
    from testbed.backends.emulated.multihost import MultiHostBackend
    from testbed.emulation.hosts import cluster, hostsfile

    hosts = hostsfile.load(hosts_file)
    config = config.validate()
    where = cluster.check_plan(fabric_args, config, hosts, tunnel)  # placement and each host's part
    who = incast_senders(where, victim, senders)
    rows = incast_rows(where.fabric, who, victim, seconds, config.rate_bps, load, transfer_bytes)
    if out is None:
        raise TestbedError("bench pfc --hosts needs a directory for its logs")
    out = Path(out)
    home = where.gpu_host[victim[0]]
    cross_senders = [g for g in who if where.gpu_host[g] != home]
    log(f"incast over {len(hosts.names)} hosts: gpu{', gpu'.join(map(str, who))} -> {_name(victim)} ({home}), "
        f"{len(cross_senders)} from other hosts, {len(rows)} transfers of {transfer_bytes} B over {seconds:g} s "
        f"({load:g}x the link), PFC on")
    traffic = PlannedTraffic(rows)
    timeout = max(60.0, 3 * load * seconds)  # the victim's link drains load x seconds of data
    carried = MultiHostBackend(hosts_file, tunnel).carry(FabricSpec(fabric_args, config, pfc), traffic,
                                                         Conditions(timeout_s=timeout), out, log)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pfc.txt").write_text("".join(ln if ln.endswith("\n") else ln + "\n" for ln in carried.pauses.lines))
    split = json.loads((out / "pfc_hosts.json").read_text()) if (out / "pfc_hosts.json").exists() else {}
    counted = count_events(out / "pfc.txt")
    drops = carried.counters.drops() if carried.counters is not None else None
    verified = sum(1 for r in carried.rows if r.get("verified"))
    return {
        "fabric": {"kind": fabric_args["kind"], "gpus": where.fabric.n_gpus},
        "hosts": [{"host": h, "gpus": len(where.gpus_on(h)), "switches": len(where.switches_on(h))}
                  for h in hosts.names],
        "tunnel": tunnel, "cables": len(where.fabric.cables), "cross_host_cables": len(where.cross),
        "incast": {"victim": _name(victim), "victim_host": home, "senders": [f"gpu{g}" for g in who],
                   "cross_host_senders": [f"gpu{g}" for g in cross_senders], "seconds": seconds, "load": load,
                   "transfer_bytes": transfer_bytes},
        "latency": split.get("latency"),
        "per_host": split.get("per_host"),
        **counted,
        "drops": drops,
        "switch_drops": carried.counters.drops("switch") if carried.counters is not None else None,
        "nic_drops": carried.counters.drops("nic") if carried.counters is not None else None,
        "lossless": drops == 0,
        "transfers": {"planned": len(rows), "verified": verified, "failed": len(carried.rows) - verified},
        "crashed_agents": carried.crashed,
        "clocks": carried.clocks,
        "rate_bps": config.rate_bps, "mtu": config.mtu, "logs": str(out),
    }
