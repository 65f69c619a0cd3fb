"""The ``replay`` verb: flags -> RepetitionConfig, one repetition on one fabric, summary table, run directory last.

Every replay flag defaults to None: a flag left out takes the experiment schema's
default (``testbed.experiment.schema``), so ``replay``, ``run`` and an experiment file agree.
"""

from __future__ import annotations

import dataclasses
import json
import sys

from testbed.cli.options import (
    add_fabric_options,
    add_link_options,
    add_pfc_options,
    datapath_config,
    fabric_kwargs,
    pfc_config,
)
from testbed.paths import REPORTS
from testbed.units import parse_rate, parse_seconds

# flag dest -> (ReplayConfig field, parse of the flag's value); in the order the values are parsed
FLAGS: dict[str, tuple[str, object]] = {
    "trace": ("trace", None),
    "format": ("trace_format", None),
    "skip_bad": ("skip_bad", None),
    "start": ("start_s", parse_seconds),
    "duration": ("duration_s", parse_seconds),
    "first": ("first_n", None),
    "speed": ("speed", None),
    "model": ("model", None),
    "dtype": ("dtype", None),
    "prefill_tp": ("prefill_tp", None),
    "decode_tp": ("decode_tp", None),
    "scheduler": ("scheduler", None),
    "seed": ("seed", None),
    "mode": ("mode", None),
    "chunk": ("chunk_bytes", lambda v: v or None),
    "policy": ("policy", None),
    "cross": ("cross_flows", None),
    "represents": ("represents_bps", parse_rate),
    "backend": ("backend", None),
}


def replay_settings(args):
    """The schema's default ReplayConfig with the flags the user gave applied (checked)."""
    from testbed.experiment.schema import Experiment, replay_config

    given = {}
    for dest, (name, parse) in FLAGS.items():
        value = getattr(args, dest)
        if value is not None:
            given[name] = parse(value) if parse else value
    return dataclasses.replace(replay_config(Experiment.model_validate({})), **given).validate()


def cmd_replay(args) -> int:
    from testbed.cli.outputs import out_root as out_dir
    from testbed.repetition.orchestrate import run_repetition

    out_root = out_dir(args.out)  # before anything is built
    cfg = replay_settings(args)  # a bad trace fails before anything is built too

    def log(m):
        print(m, file=sys.stderr)

    run_dir = run_repetition(fabric_kwargs(args) | {"kind": args.fabric}, datapath_config(args), cfg,
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


def register(sub) -> None:
    from testbed import backends
    from testbed.experiment.schema import Trace
    from testbed.fabric import FABRICS
    from testbed.fabric.routing import POLICIES

    p = sub.add_parser("replay", help="replay KV-cache transfers of a trace over a fabric (brought up if none is)")
    p.add_argument("fabric", choices=FABRICS)
    add_fabric_options(p)
    add_link_options(p)
    add_pfc_options(p)
    p.add_argument("--trace", help="Mooncake JSONL or Azure CSV trace, plain or .gz "
                                   "(default data/traces/mooncake_conversation.jsonl.gz)")
    p.add_argument("--format", choices=["auto", "mooncake", "azure"])
    p.add_argument("--skip-bad", action="store_true", default=None, help="skip bad trace rows (and report how many)")
    p.add_argument("--start", help="trace time where the slice starts (e.g. 600s)")
    p.add_argument("--duration", help=f"trace time replayed (default {Trace.model_fields['duration_s'].default:g}s)")
    p.add_argument("--first", type=int, help="at most this many requests")
    p.add_argument("--speed", type=float, help="replay the trace this many times faster")
    p.add_argument("--model")
    p.add_argument("--dtype")
    p.add_argument("--prefill-tp", type=int)
    p.add_argument("--decode-tp", type=int)
    p.add_argument("--scheduler")
    p.add_argument("--seed", type=int)
    p.add_argument("--mode", choices=["whole", "layerwise"])
    p.add_argument("--chunk", type=int, help="slice size in emulated bytes (0: no slicing)")
    p.add_argument("--policy", choices=POLICIES)
    p.add_argument("--represents",
                   help="the real link one emulated link stands for (bytes scale = represents / rate)")
    p.add_argument("--cross", type=int, metavar="N",
                   help="N background iperf3 flows between random GPU pairs during the replay")
    p.add_argument("--backend", choices=list(backends.NAMES),
                   help="what carries the messages: emulated (default; root) or ideal (no fabric, no root)")
    p.add_argument("--out", default=str(REPORTS), help="an existing folder where run directories go (default reports/)")
    p.set_defaults(func=cmd_replay)
