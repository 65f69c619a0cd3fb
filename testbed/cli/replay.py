"""The ``replay`` verb: one repetition on one fabric (brought up if none is), summary table, run directory
last.

Its flags are ``run``'s (``testbed.cli.flags``, one table) minus the run's own (fabrics, repetitions,
name): each one given overrides the schema's default, the result is checked as any experiment file is,
and the repetition runs with the same settings path as ``testbed run``. Unlike ``run``, PFC is off unless
``--pfc on``.
"""

from __future__ import annotations

import json
import sys

from common.paths import REPORTS
from testbed.cli import flags

PFC_OFF = ("pfc.enabled", False)  # replay's own default (run's is the schema's: on)


def replay_settings(args):
    """(experiment resolved, RepetitionSpec) the flags ask for: the schema's defaults, PFC off, the fabric
    given."""
    from testbed.experiment.schema import Override, Resolved, repetition_spec, validate

    given = [Override(*PFC_OFF, "replay"), Override("fabrics", [args.fabric], "replay"),
             *flags.overrides(args, flags.REPETITION)]
    resolved = Resolved(validate({}, "replay", overrides=given), None, given)
    return resolved, repetition_spec(resolved.experiment, args.fabric, 1)


def cmd_replay(args) -> int:
    from testbed.cli.outputs import out_root as out_dir
    from testbed.repetition.orchestrate import run_repetition

    out_root = out_dir(args.out)  # before anything is built
    resolved, spec = replay_settings(args)  # a bad value fails before anything is built too

    def log(m):
        print(m, file=sys.stderr)

    run_dir = run_repetition(spec, resolved.backend, out_root, log)
    s = json.loads((run_dir / "summary.json").read_text())
    print(f"{s['fabric']}: {s['verified']}/{s['transfers']} transfers verified ({s['requests']} requests), goodput "
          f"{s['goodput_bps'] / 1e6:.2f} Mbit/s (= {s['goodput_real_equivalent_bps'] / 1e9:.1f} Gbit/s real), "
          f"queue drops {s['queue_drops']}")
    if s["pfc"]["enabled"]:
        p = s["pfc"]
        print(f"  PFC: {p['pauses']} pauses on {p['ports_paused']} ports, spread up to {p['max_spread_hops']} hops, "
              f"{p['victim_flows']} victim transfers, lossless {'OK' if p['lossless_ok'] else 'VIOLATED'}")
    print(f"  FCT ms p50 {s['fct_ms']['p50']}  p99 {s['fct_ms']['p99']}  p99.9 {s['fct_ms']['p999']};  "
          f"TTFT{' proxy' if s['driver'] == 'plan' else ''} ms p50 {s['ttft_ms']['p50']}  p99 {s['ttft_ms']['p99']};  "
          f"start lateness ms p99 {s['start_lateness_ms']['p99']}")
    if s.get("cross_traffic"):
        print(f"  cross traffic: {s['cross_traffic']['flows']} iperf3 flows, "
              f"{s['cross_traffic']['goodput_bps'] / 1e6:.2f} Mbit/s")
    for w in s["warnings"]:
        print(f"WARNING: {w}", file=sys.stderr)
    print(run_dir)
    return 0 if s["verified"] == s["transfers"] and s["pfc"].get("lossless_ok") is not False else 1


def register(sub) -> None:
    from testbed.repetition.settings import FABRIC_NAMES

    p = sub.add_parser("replay", help="one repetition on one fabric (brought up if none is): the planned replay "
                                      "of a trace's KV transfers by default")
    p.add_argument("fabric", choices=FABRIC_NAMES)
    flags.add_flags(p, flags.REPETITION)
    flags.add_set(p)
    p.add_argument("--out", default=str(REPORTS), help="an existing folder where run directories go (default reports/)")
    p.set_defaults(func=cmd_replay)
