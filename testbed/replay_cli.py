"""The ``replay`` verb: flags -> ReplayConfig, run, summary table, run directory last."""

from __future__ import annotations

import json
import sys

from testbed.paths import DEFAULT_TRACE, REPORTS
from testbed.replay import ReplayConfig
from testbed.units import parse_rate, parse_seconds


def cmd_replay(args) -> int:
    from testbed import replay
    from testbed.emulation_cli import datapath_config, fabric_kwargs, pfc_config
    from testbed.outputs import out_root as out_dir

    out_root = out_dir(args.out)  # before anything is built
    # validated here: a bad trace fails before anything is built
    cfg = ReplayConfig(trace=args.trace, trace_format=args.format, skip_bad=args.skip_bad,
                       start_s=parse_seconds(args.start), duration_s=parse_seconds(args.duration),
                       first_n=args.first, speed=args.speed, model=args.model, dtype=args.dtype,
                       prefill_tp=args.prefill_tp, decode_tp=args.decode_tp, scheduler=args.scheduler,
                       seed=args.seed, mode=args.mode, chunk_bytes=args.chunk or None, policy=args.policy,
                       cross_flows=args.cross, represents_bps=parse_rate(args.represents)).validate()

    def log(m):
        print(m, file=sys.stderr)

    run_dir = replay.replay(fabric_kwargs(args) | {"kind": args.fabric}, datapath_config(args), cfg,
                            out_root, log, pfc=pfc_config(args))
    s = json.loads((run_dir / "summary.json").read_text())
    print(f"{s['fabric']}: {s['verified']}/{s['transfers']} transfers verified ({s['requests']} requests), goodput "
          f"{s['goodput_bps'] / 1e6:.2f} Mbit/s (= {s['goodput_real_equivalent_bps'] / 1e9:.1f} Gbit/s real), "
          f"queue drops {s['queue_drops']}")
    if s["pfc"]["enabled"]:
        p = s["pfc"]
        print(f"  PFC: {p['pauses']} pauses on {p['ports_paused']} ports, spread up to {p['max_spread_hops']} hops, "
              f"{p['victim_flows']} victim transfers, lossless {'OK' if p['lossless_ok'] else 'VIOLATED'}")
    print(f"  FCT ms p50 {s['fct_ms']['p50']}  p99 {s['fct_ms']['p99']}  p99.9 {s['fct_ms']['p999']};  "
          f"TTFT proxy ms p50 {s['ttft_ms']['p50']}  p99 {s['ttft_ms']['p99']};  "
          f"start lateness ms p99 {s['start_lateness_ms']['p99']}")
    if s.get("cross_traffic"):
        print(f"  cross traffic: {s['cross_traffic']['flows']} iperf3 flows, "
              f"{s['cross_traffic']['goodput_bps'] / 1e6:.2f} Mbit/s")
    for w in s["warnings"]:
        print(f"WARNING: {w}", file=sys.stderr)
    print(run_dir)
    return 0 if s["verified"] == s["transfers"] and s["pfc"].get("lossless_ok") is not False else 1


def register(sub, add_fabric_options, add_link_options) -> None:
    from testbed.fabric import FABRICS
    from testbed.fabric.routing import DEFAULT_POLICY, POLICIES

    p = sub.add_parser("replay", help="replay KV-cache transfers of a trace over a fabric (brought up if none is)")
    p.add_argument("fabric", choices=FABRICS)
    add_fabric_options(p)
    add_link_options(p)
    from testbed.emulation_cli import add_pfc_options

    add_pfc_options(p)
    p.add_argument("--trace", default=str(DEFAULT_TRACE),
                   help="Mooncake JSONL or Azure CSV trace, plain or .gz "
                        "(default data/traces/mooncake_conversation.jsonl.gz)")
    p.add_argument("--format", default="auto", choices=["auto", "mooncake", "azure"])
    p.add_argument("--skip-bad", action="store_true", help="skip bad trace rows (and report how many)")
    p.add_argument("--start", default="0", help="trace time where the slice starts (e.g. 600s)")
    p.add_argument("--duration", default="120s", help="trace time replayed (default 120s)")
    p.add_argument("--first", type=int, help="at most this many requests")
    p.add_argument("--speed", type=float, default=1.0, help="replay the trace this many times faster")
    p.add_argument("--model", default="llama-3.1-70b")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--prefill-tp", type=int, default=8)
    p.add_argument("--decode-tp", type=int, default=8)
    p.add_argument("--scheduler", default="round_robin")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mode", default="whole", choices=["whole", "layerwise"])
    p.add_argument("--chunk", type=int, default=65536, help="slice size in emulated bytes (0: no slicing)")
    p.add_argument("--policy", default=DEFAULT_POLICY, choices=POLICIES)
    p.add_argument("--represents", default="400gbit",
                   help="the real link one emulated link stands for (bytes scale = represents / rate)")
    p.add_argument("--cross", type=int, default=0, metavar="N",
                   help="N background iperf3 flows between random GPU pairs during the replay")
    p.add_argument("--out", default=str(REPORTS), help="an existing folder where run directories go (default reports/)")
    p.set_defaults(func=cmd_replay)
