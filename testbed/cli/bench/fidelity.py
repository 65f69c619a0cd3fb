"""``bench fidelity zcube|roft``: permutation and all-to-all iperf3 flows against the model's ideal rates
(``--sweep``: the permutation at several link rates)."""

from __future__ import annotations

import json
import sys

from common.units import parse_rate
from testbed.cli.bench.common import add_common, log, preflight
from testbed.cli.options import fabric_spec


def cmd(args) -> int:
    from testbed.bench import fidelity

    preflight(args, check=lambda a: None)
    spec = fabric_spec(args)
    fargs, cfg = spec.args, spec.datapath
    if args.sweep:
        rates = [parse_rate(r) for r in args.sweep.split(",")]
        doc = fidelity.sweep(fargs, cfg, rates, args.duration, args.omit, log, ecmp=args.ecmp)
        if args.json:
            print(json.dumps(doc, indent=1))
        else:
            best = doc["highest_rate_at_fidelity_bps"]
            print(f"capacity at fidelity: {doc['capacity_at_fidelity_bps'] / 1e6:.1f} Mbit/s total goodput"
                  + (f" at {best / 1e6:g} Mbit/s links" if best else " (no rate met the targets)"))
        return 0
    patterns = tuple(args.pattern.split(",")) if args.pattern else ("permutation", "all-to-all")
    doc = fidelity.bench(fargs, cfg, args.duration, args.omit, log, patterns, ecmp=args.ecmp)
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    if args.flows:
        for f in doc["flows"]:
            print(f"  {f['pattern']:<11} {f['src']:>6}:p{f['src_port']} -> {f['dst']:<6}:p{f['dst_port']}  goodput "
                  f"{f['goodput_bps'] / 1e6:6.3f}  ideal {f['ideal_bps'] / 1e6:6.3f} Mbit/s  ratio {f['ratio']:.3f}")
    s = doc["summary"]
    print(f"{args.fabric} n={args.gpus} at {s['rate_bps'] / 1e6:g} Mbit/s, MTU {s['mtu']}, "
          f"{s['duration_s']} s per pattern" + (f", ECMP {s['ecmp']}" if s.get("ecmp") else ""))
    for name in patterns:
        p = s[name]
        print(f"  {name:<11} {p['flows']:>5} flows: median {p['median_ratio']:.3f}, min {p['min_ratio']:.3f}, "
              "aggregate "
              f"{p['aggregate_goodput_bps'] / 1e6:6.1f} Mbit/s, {p['retransmits']} retransmits, {p['drops']} queue "
              f"drops; ovs-vswitchd {p['cpu']['ovs_vswitchd_cores']:.2f} cores, machine "
              f"{p['cpu']['machine_busy_fraction']:.0%} busy{'  CPU SATURATED' if p['cpu_saturated'] else ''}"
              + ("" if p["ideal_known"] else "  (vs the collision-free ideal: ECMP paths not learnt)"))
    print(f"bring-up {s.get('bringup_s')} s, teardown {s.get('teardown_s')} s")
    if s["cpu_saturated"]:
        print("FIDELITY WARNING: the emulator saturated the CPU; these numbers are not a result", file=sys.stderr)
    if s["targets_met"] is not None:
        print("permutation targets (median >= 0.95, min >= 0.85, not saturated): "
              + ("met" if s["targets_met"] else "MISSED"))
    return 0


def register(sub) -> None:
    p = sub.add_parser("fidelity", help="iperf3 permutation and all-to-all against the model's ideal rates")
    add_common(p, fabric_required=True)
    p.add_argument("--duration", type=float, default=16, help="seconds of traffic per pattern (default 16)")
    p.add_argument("--omit", type=int, default=3, help="seconds of slow start left out (default 3)")
    p.add_argument("--sweep", help="comma-separated link rates, e.g. 2,3,4,5 (Mbit/s); permutation only")
    p.add_argument("--pattern", help="comma-separated patterns (default permutation,all-to-all)")
    p.add_argument("--flows", action="store_true", help="print every flow, not only the summary")
    p.add_argument("--ecmp", choices=["spread", "hashed"], default="spread",
                   help="ROFT permutation: client ports probed so ECMP spreads the flows without collisions "
                        "(spread, default) or OVS's hash as it falls, ideal learnt per flow (hashed)")
    p.set_defaults(func=cmd)
