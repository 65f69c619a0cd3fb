"""The benchmarks' verb: ``bench fidelity``, ``bench pfc``, ``bench replay`` and ``bench exchange`` (as root;
each builds its own fabrics)."""

from __future__ import annotations

import json
import sys

from testbed.cli.options import (
    add_fabric_options,
    add_link_options,
    add_pfc_options,
    datapath_config,
    fabric_kwargs,
    pfc_config,
    print_result,
)
from testbed.errors import TestbedError
from testbed.units import parse_rate


def cmd_bench_pfc(args) -> int:
    import time
    from pathlib import Path

    from testbed.bench import pfc as pfc_bench
    from testbed.paths import REPORTS

    fargs = fabric_kwargs(args) | {"kind": args.fabric or "zcube"}
    stamp = time.strftime('%Y%m%d-%H%M%S')
    out = Path(args.logs) if args.logs else REPORTS / f"bench-pfc-{fargs['kind']}{fargs['gpus']}-{stamp}"
    doc = pfc_bench.bench(fargs, datapath_config(args), pfc_config(args), senders=args.senders,
                          seconds=args.duration, log=lambda m: print(m, file=sys.stderr), out=out)
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
          f"{len(doc['incast']['senders'])} senders -> {doc['incast']['victim']}, {doc['incast']['seconds']} s")
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


def sized(args) -> list:
    """The default experiment at the fabric flags' size: --gpus, --gpus-per-switch, --gpus-per-server
    (servers are the serving layout's too: half of them prefill, half decode)."""
    from testbed.experiment.schema import Override

    return [Override(key, getattr(args, key), f"--{key.replace('_', '-')}")
            for key in ("gpus", "gpus_per_switch", "gpus_per_server")]


def cmd_bench_replay(args) -> int:
    from testbed.bench import replay as replay_bench
    from testbed.cli.outputs import out_root, require_dir
    from testbed.paths import REPORTS

    levels = replay_bench.parse_levels(args.levels)
    duration = args.duration if args.duration is not None else replay_bench.DURATION_S
    root = require_dir(args.logs, "--logs") if args.logs else out_root(REPORTS)
    status, doc = replay_bench.run_bench(args.fabric or "zcube", levels, duration, root, sized(args),
                                         log=lambda m: print(m, file=sys.stderr))
    print_result(doc, replay_bench.table(doc), doc["dir"], args.json)
    return status


def cmd_bench_exchange(args) -> int:
    import time
    from pathlib import Path

    from testbed.bench import exchange
    from testbed.experiment.schema import datapath_config as exp_datapath
    from testbed.experiment.schema import fabric_args, pfc_settings, replay_config, resolve
    from testbed.paths import REPORTS

    exp = resolve(None, sized(args)).experiment  # the default experiment's workload and links
    kind = args.fabric or "zcube"
    out = Path(args.logs) if args.logs else REPORTS / f"bench-exchange-{kind}-{time.strftime('%Y%m%d-%H%M%S')}"
    doc = exchange.bench(fabric_args(exp, kind), exp_datapath(exp), pfc_settings(exp), replay_config(exp, 1), out,
                         log=lambda m: print(m, file=sys.stderr))
    print_result(doc, exchange.table(doc), out, args.json)
    return 0


def cmd_bench_failover(args) -> int:
    from pathlib import Path

    from testbed.bench import failover

    modes = failover.MODES if args.mode == "both" else (args.mode,)
    docs = failover.bench(fabric_kwargs(args) | {"kind": args.fabric or "zcube"}, datapath_config(args), modes,
                          log=lambda m: print(m, file=sys.stderr), logs=Path(args.logs) if args.logs else None,
                          pfc=pfc_config(args))
    if args.json:
        contract = [{k: v for k, v in d.items() if not k.startswith("per_")} for d in docs]  # the contract and more
        print(json.dumps(contract[0] if len(contract) == 1 else contract, indent=1))
        return 0
    for d in docs:
        r = d["recovery_ms"]
        print(f"{d['fabric']} {d['mode']:<10} {len(d['cables'])} cuts: {d['probes_stalled']}/{d['probes']} probe "
              f"streams hit, data-plane recovery p50 {r['p50']} p99 {r['p99']} max {r['max']} ms (blackhole p99 "
              f"{d['blackhole_ms']['p99']} ms); {d['lost_transfers']}/{d['crossing']} crossing TCP flows lost, "
              f"{d['bytes_retrans']} B resent; planned paths back {d['restored_ms']['p50']} ms after a clear; "
              "controller restart: "
              f"{d['controller_restart_drops']} packets dropped, {d['flows_reinstalled']} flows reinstalled"
              + ("  CPU SATURATED" if d["cpu_saturated"] else ""))
    if any(d["cpu_saturated"] for d in docs):
        print("FIDELITY WARNING: the emulator saturated the CPU; these numbers are not a result", file=sys.stderr)
    return 0


def check_bench_outputs(args) -> None:
    """bench pfc --logs DIR: made if missing, so DIR or else its folder must exist and take new files."""
    if args.bench in ("pfc", "exchange", "failover") and args.logs:
        from testbed.cli.outputs import require_new_dir

        require_new_dir(args.logs, "--logs")
    if args.bench == "replay":
        from testbed.bench.replay import parse_levels
        from testbed.cli.outputs import require_dir

        parse_levels(args.levels)
        if args.logs:
            require_dir(args.logs, "--logs")


def cmd_bench(args) -> int:
    from testbed.bench import fidelity
    from testbed.emulation import fabricctl

    check_bench_outputs(args)  # a bad --logs fails before root, OVS or a fabric is needed
    fabricctl.require_root()
    fabricctl.require_ovs()
    if args.bench == "replay":
        return cmd_bench_replay(args)
    if args.bench == "exchange":
        return cmd_bench_exchange(args)
    if args.bench == "failover":
        return cmd_bench_failover(args)
    if args.duration is None:
        args.duration = 16
    if args.bench == "pfc":
        return cmd_bench_pfc(args)
    if args.fabric is None:
        raise TestbedError("bench fidelity needs a fabric: zcube or roft")
    fargs = fabric_kwargs(args) | {"kind": args.fabric}
    cfg = datapath_config(args)
    def log(m):
        print(m, file=sys.stderr)

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
    from testbed.fabric import FABRICS

    p = sub.add_parser("bench", help="benchmarks: bench fidelity zcube|roft [--sweep 2,3,4]; bench pfc [zcube|roft]; "
                                     "bench replay [zcube|roft] [--levels 1,64,128]; bench exchange [zcube|roft]; "
                                     "bench failover [zcube|roft] [--mode fast|controller|both]")
    p.add_argument("bench", choices=["fidelity", "pfc", "replay", "exchange", "failover"])
    p.add_argument("fabric", nargs="?", choices=FABRICS)
    add_fabric_options(p)
    add_link_options(p)
    p.add_argument("--duration", type=float, help="seconds of traffic (default 16; bench replay: cluster seconds "
                                                  "per level, default 8)")
    p.add_argument("--levels", help="bench replay: requests in flight per level (default 1,64,128,192,256)")
    p.add_argument("--senders", type=int, default=8, help="bench pfc: incast senders (default 8)")
    p.add_argument("--logs", help="bench pfc: where the pause logs and figures go (default reports/bench-pfc-...); "
                                  "bench replay: the folder its sweep directory goes in (default reports/); "
                                  "bench exchange: its agents' logs and bench.json (reports/bench-exchange-*)")
    add_pfc_options(p, default="on")
    p.add_argument("--omit", type=int, default=3, help="seconds of slow start left out (default 3)")
    p.add_argument("--sweep", help="comma-separated link rates, e.g. 2,3,4,5 (Mbit/s); permutation only")
    p.add_argument("--pattern", help="comma-separated patterns (default permutation,all-to-all)")
    p.add_argument("--flows", action="store_true", help="print every flow, not only the summary")
    p.add_argument("--ecmp", choices=["spread", "hashed"], default="spread",
                   help="ROFT permutation: client ports probed so ECMP spreads the flows without collisions "
                        "(spread, default) or OVS's hash as it falls, ideal learnt per flow (hashed)")
    p.add_argument("--mode", choices=["fast", "controller", "both"], default="both",
                   help="bench failover: the switches' watch ports move traffic off a dead cable (fast), only the "
                        "controller's repair does (controller), or one run of each (both, default)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bench)
