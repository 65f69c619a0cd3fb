"""``bench exchange``: expert-parallel exchanges of the default workload, one at a time on an idle fabric.

In a serving run an exchange shares the fabric with the other engine's steps and the KV
transfers, so its span against its ideal mixes the emulation's overhead with queueing. Here
the serving loop runs first against an ideal network (``traffic.model.serving.run_ideal``) to get
real exchanges of the experiment (per phase: engine, step, dispatch or combine; the message
sizes the model and the expert routing give at that load), a sample of them is laid out one
after the other with idle gaps, and the planned replay's agents send them over the fabric.
Per exchange: its span (from the order, the plan's start, to the last byte) over its ideal
(``testbed.repetition.drivers.live_summary.exchange_ideal_s``: the busiest GPU's bytes at both NIC ports' rate plus
the last packet's store-and-forward over the exchange's longest path in the routing model). The goal is a
median within 1.1x.

The links' token buckets hold ``burst_bytes`` each, so an exchange whose busiest port sends
less than that leaves at the veth's speed and can beat the ideal (a ratio under 1).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from fabrics import Fabric, addressing
from fabrics.routing import forwarding_tables, port_pairs
from testbed.repetition.drivers.live_summary import exchange_ideal_s, longest_path
from traffic.runtime.launcher import AGENT_PORT

GOAL = 1.1
SAMPLE = {"decode": 16, "prefill": 8}  # exchanges of each engine kind (dispatch and combine each)
GAP_S = 0.5  # wall seconds of idle fabric between two exchanges, at least (buckets refill in ~50 ms)
LEAD_S = 1.0


def ideal_phases(setup, port_bps: float) -> dict[tuple, list]:
    """(engine, step, kind) -> the messages of that exchange, from the serving loop run against an ideal
    network for the experiment's duration (KV transfers left out)."""
    from traffic.model import serving

    cluster = setup.traffic.cluster()
    serving.run_ideal(cluster, port_bps, until_s=setup.traffic.duration_s)
    phases: dict[tuple, list] = {}
    for m in cluster.messages.values():
        if m.kind != "kv" and m.step is not None:
            phases.setdefault((m.engine, m.step, m.kind), []).append(m)
    return phases


def sample(phases: dict[tuple, list]) -> list[tuple]:
    """Evenly spaced exchanges of each engine kind and phase from the second half of each engine's steps
    (the load has ramped up by then: closed-loop requests all arrive at once)."""
    last: dict[str, int] = {}
    for engine, step, _ in phases:
        last[engine] = max(last.get(engine, 0), step)
    out = []
    for kind, n in SAMPLE.items():
        for phase in ("dispatch", "combine"):
            keys = sorted(k for k in phases if k[0].startswith(kind) and k[2] == phase and k[1] > last[k[0]] // 2)
            if keys:
                stride = max(1, len(keys) // n)
                out += keys[::stride][:n]
    return out


def plan(phases: dict[tuple, list], keys: list[tuple], policy: str, rate_bps: float, mtu: int,
         fabric: Fabric) -> tuple[list[dict], dict[int, tuple]]:
    """Plan rows, one exchange after the other (every message of an exchange at its start), and the
    exchange each row id belongs to. A pair's messages alternate over its port choices, as the
    coordinator's static policies do."""
    rows, of = [], {}
    tables = forwarding_tables(fabric)
    t = LEAD_S
    next_id = 0
    for key in keys:
        used: dict[tuple, int] = {}
        first = len(rows)
        for m in sorted(phases[key], key=lambda m: m.id):
            pair = (m.src_gpu, m.dst_gpu)
            options = port_pairs(*pair, policy)
            sp, dp = options[used.get(pair, 0) % len(options)]
            used[pair] = used.get(pair, 0) + 1
            rows.append({"id": next_id, "request_id": None, "src": f"gpu{m.src_gpu}", "dst": f"gpu{m.dst_gpu}",
                         "src_ip": addressing.ip_of(m.src_gpu, sp), "dst_ip": addressing.ip_of(m.dst_gpu, dp),
                         "dst_port": AGENT_PORT, "bytes": m.bytes, "start": round(t, 6),
                         **addressing.alt_ips(m.src_gpu, sp, m.dst_gpu, dp)})
            of[next_id] = key
            next_id += 1
        mine = rows[first:]
        t += max(GAP_S, 3 * exchange_ideal_s(mine, rate_bps, mtu, longest_path(fabric, mine, tables)))
    return rows, of


def ratios(rows: list[dict], of: dict[int, tuple], rate_bps: float, mtu: int, fabric: Fabric) -> list[dict]:
    """Per exchange: its ideal, its span from the order and from the first byte sent, over the ideal."""
    tables = forwarding_tables(fabric)
    by: dict[tuple, list[dict]] = {}
    for r in rows:
        by.setdefault(of[r["id"]], []).append(r)
    out = []
    for key, ms in by.items():
        ok = all(m["verified"] for m in ms)
        ideal = exchange_ideal_s(ms, rate_bps, mtu, longest_path(fabric, ms, tables))
        end = max(m["end"] for m in ms) if ok else None

        def over_ideal(first: str) -> float | None:
            return None if end is None else round((end - min(m[first] for m in ms)) / ideal, 4)

        out.append({"engine": key[0], "step": key[1], "phase": key[2], "messages": len(ms),
                    "bytes": sum(m["bytes"] for m in ms), "verified": ok, "ideal_ms": round(ideal * 1e3, 3),
                    "vs_ideal_from_order": over_ideal("scheduled_start"),
                    "vs_ideal_from_first_send": over_ideal("start")})
    return out


def summarize(fabric: str, per_exchange: list[dict], extra: dict) -> dict:
    """Median and P90 of both ratios per engine kind and phase, and whether the goal was met."""
    groups: dict[str, list[dict]] = {}
    for e in per_exchange:
        groups.setdefault(f"{e['engine'].rstrip('0123456789')} {e['phase']}", []).append(e)

    def stats(values: list[float]) -> dict | None:
        if not values:
            return None
        v = sorted(values)
        return {"p50": round(statistics.median(v), 3), "p90": round(v[min(len(v) - 1, int(0.9 * len(v)))], 3),
                "max": round(v[-1], 3), "n": len(v)}

    table = {g: {"ideal_ms_p50": round(statistics.median(e["ideal_ms"] for e in es), 2),
                 "from_order": stats([e["vs_ideal_from_order"] for e in es if e["vs_ideal_from_order"] is not None]),
                 "from_first_send": stats([e["vs_ideal_from_first_send"] for e in es
                                           if e["vs_ideal_from_first_send"] is not None])}
             for g, es in sorted(groups.items())}
    every = [e["vs_ideal_from_order"] for e in per_exchange if e["vs_ideal_from_order"] is not None]
    med = round(statistics.median(every), 3) if every else None
    return {"fabric": fabric, "goal_median": GOAL, "median_from_order": med,
            "goal_met": med is not None and med <= GOAL and all(e["verified"] for e in per_exchange),
            "unverified": sum(1 for e in per_exchange if not e["verified"]), "groups": table,
            "exchanges": per_exchange, **extra}


def bench(spec, out: Path, log) -> dict:
    """Bring the fabric of ``spec`` (a RepetitionSpec) up, replay the sampled exchanges, bring it down; the
    summary document."""
    from fabrics import build_fabric
    from testbed.backends.emulated.agents import run_plan
    from testbed.emulation import fabricctl
    from testbed.repetition.drivers.live import prepare_live
    from traffic.runtime import records

    cfg, dp, fabric_args = spec, spec.fabric.datapath, spec.fabric.args
    rate = dp.rate_bps
    fabric = build_fabric(**fabric_args)
    setup = prepare_live(spec, fabric_args["gpus"], rate)
    port_bps = cfg.represents_bps  # the real cluster's NIC port: the ideal network of the serving loop
    phases = ideal_phases(setup, port_bps)
    keys = sample(phases)
    if not keys:
        from common.errors import TestbedError

        raise TestbedError("the serving loop produced no expert-parallel exchange: bench exchange needs an MoE model")
    rows, of = plan(phases, keys, setup.config["policy"], rate, dp.mtu, fabric)
    log(f"{len(keys)} exchanges, {len(rows)} messages, {rows[-1]['start']:.1f} s of plan")
    out.mkdir(parents=True, exist_ok=True)
    fabricctl.require_root()
    st = fabricctl.up(fabric_args, dp, log=log, pfc=spec.fabric.pfc)
    try:
        t0 = time.monotonic()
        res = run_plan(list(st.model().gpus()), rows, out / "agents", cfg.transfer_timeout_s, cfg.serving.connections,
                       log)
        wall = time.monotonic() - t0
    finally:
        fabricctl.down()
    merged = records.merge_results(res.agents_dir, t0=res.t0)
    per = ratios(merged, of, rate, dp.mtu, fabric)
    doc = summarize(fabric_args["kind"], per, {
        "rate_bps": rate, "mtu": dp.mtu, "represents_bps": cfg.represents_bps, "time_dilation": cfg.time_dilation,
        "concurrency": cfg.serving.concurrency, "model": cfg.serving.model, "crashed_agents": res.crashed,
        "agents_cpu_s": res.cpu_s, "wall_s": round(wall, 1), "dir": str(out)})
    (out / "bench.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def table(doc: dict) -> list[str]:
    """The printed table: one line per engine kind and phase."""
    def f(x: dict | None, key: str) -> str:
        return "-" if not x else f"{x[key]:.2f}"

    out = [f"bench exchange on {doc['fabric']}: {len(doc['exchanges'])} expert-parallel exchanges of the default "
           f"workload ({doc['model']}, {doc['concurrency']} in flight), one at a time on the idle fabric",
           f"{'exchange':<18}{'n':>4}{'ideal ms':>10}{'from order P50':>16}{'P90':>7}"
           f"{'from 1st send P50':>19}{'P90':>7}"]
    for name, g in doc["groups"].items():
        o, s1 = g["from_order"], g["from_first_send"]
        out.append(f"{name:<18}{(o or {}).get('n', 0):>4}{g['ideal_ms_p50']:>10.1f}{f(o, 'p50'):>16}{f(o, 'p90'):>7}"
                   f"{f(s1, 'p50'):>19}{f(s1, 'p90'):>7}")
    verdict = "met" if doc["goal_met"] else "MISSED"
    out.append(f"median over all exchanges, from the order: {doc['median_from_order']} (goal <= {doc['goal_median']}: "
               f"{verdict}); {doc['unverified']} exchanges with an unverified message")
    return out
