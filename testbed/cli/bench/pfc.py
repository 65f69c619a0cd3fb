"""``bench pfc [zcube|roft]``: an incast with PFC on and off: pause and resume latency, drops, how far
pauses spread, bystander flows."""

from __future__ import annotations

import json
import sys

from testbed.cli.bench.common import add_common, log, preflight
from testbed.cli.fabric import _hosts_option
from testbed.cli.options import add_pfc_options, fabric_spec


def cmd(args) -> int:
    if args.hosts:
        if args.one_switch:
            from common.errors import TestbedError

            raise TestbedError("--one-switch picks senders on one machine's fabric: it does not go with --hosts")
        return cmd_hosts(args)
    preflight(args)
    import time
    from pathlib import Path

    from common.paths import REPORTS
    from testbed.bench import pfc as pfc_bench

    spec = fabric_spec(args)
    fargs = spec.args
    stamp = time.strftime('%Y%m%d-%H%M%S')
    out = Path(args.logs) if args.logs else REPORTS / f"bench-pfc-{fargs['kind']}{fargs['gpus']}-{stamp}"
    doc = pfc_bench.bench(fargs, spec.datapath, spec.pfc, senders=args.senders,
                          seconds=args.duration, log=log, out=out, one_switch=args.one_switch)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(doc, indent=1))
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    on, off = doc["incast"]["pfc_on"], doc["incast"]["pfc_off"]

    def lat(key):
        d = doc[key]
        return f"p50 {d['p50']} ms, p99 {d['p99']} ms, max {d['max']} ms ({d['n']} events)"

    print(f"{fargs['kind']} n={fargs['gpus']} at {doc['rate_bps'] / 1e6:g} Mbit/s: incast "
          f"{len(doc['incast']['senders'])} senders{' on one switch' if args.one_switch else ''} -> "
          f"{doc['incast']['victim']}, {doc['incast']['seconds']} s")
    print(f"  pause latency   {lat('pause_latency_ms')}  (helper reaction p99 {doc['reaction_ms']['p99']} ms)")
    print(f"  resume latency  {lat('resume_latency_ms')}")
    x = on.get("xoff_threshold_bytes") or {}
    print(f"  thresholds: {doc.get('thresholds')}; XOFF at the crossings min {x.get('min')} B, "
          f"median {x.get('p50')} B, max {x.get('max')} B")
    print(f"  target: p99 within {doc['target_ms']} ms, never above 5 ms: "
          f"{'met' if doc['within_target'] else 'MISSED'}")
    for w in doc.get("warnings", []):
        print(f"  WARNING: {w}")
    h = on.get("helper", {})
    print(f"  helper: {h.get('scheduling')}; woken by the doorbell {h.get('doorbell_rings')} times, held up "
          f"over 2 ms {h.get('loop_gaps')} times (longest {h.get('loop_gap_max_ms')} ms); "
          f"vCPU steal during the incast "
          f"{on.get('vcpu_steal_pct')} %")
    for name, r in (("PFC on ", on), ("PFC off", off)):
        print(f"  {name}: {r['drops']} drops, {r['pauses']} pauses, {r['retransmits']} retransmits, goodput "
              f"{r['goodput_bps'] / 1e6:.2f} Mbit/s"
              + (f", paused: {' '.join(r['paused_nodes'])}" if r['paused_nodes'] else ""))
    sp = doc.get("spreading")
    if sp:
        print("  congestion spreading (PFC on): bystander flows, neither to nor from the incast, beside it / alone:")
        for label, want in (("to other GPUs on the hot switch", True), ("elsewhere", False)):
            r = [x for x, hot in zip(sp["ratio"], sp["to_hot_switch"]) if hot == want]
            if r:
                print(f"    {label:<33} {len(r)} flows: median {sorted(r)[len(r) // 2]:.2f}, min {min(r):.2f}")
        print(f"    {sp['queues_paused']} queues paused, {len(sp['bystander_nics_paused'])} of them bystanders' NICs")
    print(f"  pauses spread {doc['incast']['pfc_on'].get('spread', {}).get('max_hops')} hops from "
          f"{', '.join(doc['incast']['pfc_on'].get('spread', {}).get('roots', []))}; logs and per-port figures: {out}")
    if not doc["lossless"]:
        print("LOSSLESS VIOLATION: fabric queues dropped with PFC on", file=sys.stderr)
        return 1
    return 0


def cmd_hosts(args) -> int:
    """``--hosts FILE``: the incast with PFC on over those hosts, local and cross-host pauses apart."""
    import time
    from pathlib import Path

    from common.paths import REPORTS
    from testbed.bench import pfc_hosts
    from testbed.cli.bench.common import new_logs_dir

    new_logs_dir(args)
    spec = fabric_spec(args)
    fargs = spec.args
    stamp = time.strftime('%Y%m%d-%H%M%S')
    out = Path(args.logs) if args.logs else REPORTS / f"bench-pfc-hosts-{fargs['kind']}{fargs['gpus']}-{stamp}"
    doc = pfc_hosts.bench(args.hosts, fargs, spec.datapath, spec.pfc, senders=args.senders,
                          seconds=args.duration, tunnel=args.tunnel, log=log, out=out)
    (out / "bench.json").write_text(json.dumps(doc, indent=1))
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        for line in hosts_table(doc):
            print(line)
    if not doc["lossless"]:
        print("LOSSLESS VIOLATION: fabric queues dropped with PFC on", file=sys.stderr)
        return 1
    return 0


def hosts_table(doc: dict) -> list[str]:
    inc = doc["incast"]
    lines = [f"{doc['fabric']['kind']} n={doc['fabric']['gpus']} on {len(doc['hosts'])} hosts "
             f"({', '.join(h['host'] for h in doc['hosts'])}), {doc['cross_host_cables']} of {doc['cables']} cables "
             f"cross hosts ({doc['tunnel']}), {doc['rate_bps'] / 1e6:g} Mbit/s: incast {len(inc['senders'])} senders "
             f"({len(inc['cross_host_senders'])} from other hosts) -> {inc['victim']} on {inc['victim_host']}, "
             f"{inc['seconds']:g} s",
             f"  {'':<8}{'':<9}{'n':>6} {'P50 ms':>8} {'P99 ms':>8} {'max ms':>8}"]
    for group in ("local", "cross"):
        for kind, label in (("pause", "pause"), ("resume", "resume"), ("reaction", "reaction")):
            d = ((doc.get("latency") or {}).get(group) or {}).get(kind) or {}
            lines.append(f"  {group if kind == 'pause' else '':<8}{label:<9}{d.get('n', 0):>6} "
                         + " ".join(f"{'-' if d.get(k) is None else d[k]:>8}" for k in ("p50", "p99", "max")))
    t = doc["transfers"]
    lines.append(f"  pfc.txt: {doc['pauses']} pauses, {doc['resumes']} resumes ({doc['queues_paused']} queues); "
                 f"drops {doc['drops']} ({doc['switch_drops']} switch, {doc['nic_drops']} NIC); transfers "
                 f"verified {t['verified']} of {t['planned']}")
    offsets = (doc.get("clocks") or {}).get("offsets") or {}
    if offsets:
        lines.append(f"  clock offsets to {doc['clocks'].get('reference')}'s: " + ", ".join(
            f"{h} {offsets[h]['offset_ms']} ms (+-{offsets[h]['uncertainty_ms']})"
            for h in [x["host"] for x in doc["hosts"]] if h in offsets))
    lines.append(f"  logs: {doc['logs']}")
    return lines


def register(sub) -> None:
    p = sub.add_parser("pfc", help="an incast with PFC on and off: pause latency, drops, spreading")
    add_common(p, logs_help="where the pause logs and figures go (default reports/bench-pfc-...)")
    add_pfc_options(p, default="on")
    p.add_argument("--duration", type=float, default=16, help="seconds of incast (default 16)")
    p.add_argument("--senders", type=int, default=8, help="incast senders (default 8)")
    p.add_argument("--one-switch", action="store_true",
                   help="senders whose sending ports share one switch (one cable into the hot switch), not spread")
    _hosts_option(p)  # --hosts FILE: PFC on only, local and cross-host pauses apart (testbed.bench.pfc_hosts)
    p.set_defaults(func=cmd)
