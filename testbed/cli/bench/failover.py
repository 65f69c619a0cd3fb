"""``bench failover [zcube|roft]``: cables cut and cleared under load, and a controller restart: how fast the
data plane recovers, the switches' own reaction stamped at their ports (``testbed.bench.failover``)."""

from __future__ import annotations

import json
import sys

from testbed.cli.bench.common import add_common, log, preflight
from testbed.cli.options import add_pfc_options, fabric_spec


def cmd(args) -> int:
    from pathlib import Path

    from testbed.bench import failover

    preflight(args)

    modes = failover.MODES if args.mode == "both" else (args.mode,)
    spec = fabric_spec(args)
    docs = failover.bench(spec.args, spec.datapath, modes, log=log, logs=Path(args.logs) if args.logs else None,
                          pfc=spec.pfc)
    if args.json:
        contract = [{k: v for k, v in d.items() if not k.startswith("per_")} for d in docs]  # the contract and more
        print(json.dumps(contract[0] if len(contract) == 1 else contract, indent=1))
        return 0
    for d in docs:
        r, sw = d["recovery_ms"], d["switch_reaction_ms"]
        print(f"{d['fabric']} {d['mode']:<10} {len(d['cables'])} cables, {d['cycles']} cuts: switch reaction "
              f"p50 {sw['p50']} p99 {sw['p99']} max {sw['max']} ms over {sw['n']} probe streams "
              f"({d['probes_never_moved']} never moved; OVS port-status p50 {d['ovs_port_status_ms']['p50']} "
              f"p99 {d['ovs_port_status_ms']['p99']} ms after the cut); "
              f"{d['probes_stalled']}/{d['probes']} probe "
              f"streams hit, data-plane recovery p50 {r['p50']} p99 {r['p99']} max {r['max']} ms (blackhole p99 "
              f"{d['blackhole_ms']['p99']} ms); {d['starved_through_cut']}/{d['crossing']} crossing TCP flows "
              "delivered nothing while their cable was down; "
              f"flows that delivered nothing in a cut: {d['blackholed_flows']} black-holed (path dead), "
              f"{d['backoff_flows']} in RTO back-off (transport), {d['downstream_flows']} held downstream (PFC); "
              f"{d['bytes_retrans']} B resent; planned paths back {d['restored_ms']['p50']} ms after a clear; "
              "controller restart: "
              f"{d['controller_restart_drops']} packets dropped, {d['flows_reinstalled']} flows reinstalled"
              + ("  CPU SATURATED" if d["cpu_saturated"] else ""))
    if any(d["cpu_saturated"] for d in docs):
        print("FIDELITY WARNING: the emulator saturated the CPU; these numbers are not a result", file=sys.stderr)
    return 0


def register(sub) -> None:
    p = sub.add_parser("failover", help="cables cut under load and a controller restart: recovery times")
    add_common(p, logs_help="where the probes' and flows' logs go")
    add_pfc_options(p, default="on")
    p.add_argument("--mode", choices=["fast", "controller", "both"], default="both",
                   help="the switches' watch ports move traffic off a dead cable (fast), only the controller's "
                        "repair does (controller), or one run of each (both, default)")
    p.set_defaults(func=cmd)
