"""The experiment verbs ``run``, ``sweep``, ``calibrate``: experiment file + flags -> ``testbed.experiment``'s
``run`` / ``sweep`` / ``calibrate``.

Flags override file values, and only the flags the user actually gave: every
flag defaults to None (also the fabric and link options these verbs share with
the others), so an absent flag never overwrites a file value with a default.
Each applied flag is recorded as an override in experiment.json.
"""

from __future__ import annotations

import json
import sys

from testbed.cli.options import add_fabric_and_link_options, print_result
from testbed.errors import TestbedError
from testbed.experiment.schema import Override, cli_value

# argparse dest -> (experiment key path, conversion of the flag's value)
FLAGS: dict[str, tuple[str, object]] = {
    "fabrics": ("fabrics", lambda v: [x.strip() for x in v.split(",") if x.strip()]),
    "backend": ("backend", None),
    "gpus": ("gpus", None),
    "gpus_per_switch": ("gpus_per_switch", None),
    "cables": ("cables", None),
    "gpus_per_server": ("gpus_per_server", None),
    "radix": ("radix", None),
    "rate": ("link.rate", None),
    "represents": ("link.represents", None),
    "buffer": ("link.buffer_bytes", None),
    "nic_buffer": ("link.nic_buffer_bytes", None),
    "burst": ("link.burst_bytes", None),
    "mtu": ("link.mtu", None),
    "pfc": ("pfc.enabled", lambda v: v == "on"),
    "trace": ("trace.path", None),
    "start": ("trace.start_s", None),
    "duration": ("trace.duration_s", None),
    "first": ("trace.first_n", None),
    "speed": ("trace.speed", None),
    "model": ("serving.model", None),
    "prefill_tp": ("serving.prefill_tp", None),
    "decode_tp": ("serving.decode_tp", None),
    "prefill_fraction": ("serving.prefill_fraction", None),
    "scheduler": ("serving.scheduler", None),
    "mode": ("serving.mode", None),
    "chunk": ("serving.chunk_bytes", None),
    "policy": ("serving.policy", None),
    "connections": ("serving.connections", None),
    "driver": ("serving.driver", None),
    "arrivals": ("serving.arrivals", None),
    "concurrency": ("serving.concurrency", None),
    "dilation": ("link.time_dilation", None),
    "seed": ("seed", None),
    "reps": ("repetitions", None),
    "cross": ("cross_flows", None),
    "name": ("name", None),
}


def overrides_from_args(args) -> list[Override]:
    """The flags the user gave, as overrides (in FLAGS order), then every --set in order."""
    out = []
    for dest in getattr(args, "_shared", ()):
        if dest not in FLAGS and getattr(args, dest, None) is not None:
            raise TestbedError(f"--{dest.replace('_', '-')} is not an experiment setting of run/sweep: "
                               "use --set KEY=VALUE (see experiments/schema.json)")
    for dest, (key, convert) in FLAGS.items():
        value = getattr(args, dest, None)
        if value is not None:
            out.append(Override(key, convert(value) if convert else value, f"--{dest.replace('_', '-')}"))
    for text in getattr(args, "set", None) or []:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise TestbedError(f"--set {text!r}: expected KEY=VALUE, e.g. --set pfc.xoff_bytes=30000")
        out.append(Override(key.strip(), cli_value(key.strip(), value.strip()), "--set"))
    return out


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cmd_run(args) -> int:
    from testbed.cli.outputs import out_root as out_dir
    from testbed.experiment import run
    from testbed.experiment.schema import resolve

    out_root = out_dir(args.out)  # checked before anything is built, also by --dry-run
    resolved = resolve(args.experiment, overrides_from_args(args))
    if args.dry_run:
        exp = resolved.experiment
        print(json.dumps(resolved.as_dict() | {"runs": [t.as_dict() for t in run.targets(exp)],
                                               "estimate_s": round(run.estimate_s(exp))}, indent=1))
        _stderr(f"estimated wall time: {run.estimate_text(exp)}")
        return 0
    return run.run_experiment(resolved, out_root, log=_stderr)


def cmd_sweep(args) -> int:
    from testbed.cli.outputs import out_root as out_dir
    from testbed.experiment import sweep

    out_root = out_dir(args.out)  # checked before anything is built, also by --dry-run
    if args.param:
        params = [sweep.parse_param(p) for p in args.param]
    else:  # the file's own grid
        from testbed.experiment.schema import resolve

        grid = resolve(args.experiment, []).experiment.sweep if args.experiment else None
        if not grid:
            raise TestbedError("sweep needs --param KEY=V1,V2 (one or two), e.g. --param link.rate=3mbit,4mbit, "
                               "or an experiment file with a sweep: {key: [values]} grid")
        params = [sweep.parse_param(f"{k}={','.join(str(v) for v in vals)}") for k, vals in grid.items()]
    overrides = overrides_from_args(args)
    if args.dry_run:
        points = sweep.resolve_points(args.experiment, overrides, params)
        print(json.dumps([{"point": sweep.point_name(p), "experiment": r.experiment.model_dump(mode="json")}
                          for p, r in points], indent=1))
        return 0
    slo = None
    if args.slo_ttft is not None:
        from testbed.units import parse_seconds

        slo = parse_seconds(args.slo_ttft) * 1e3
    return sweep.run_sweep(args.experiment, overrides, params, out_root, log=_stderr, slo_ttft_ms=slo)[0]


def cmd_calibrate(args) -> int:
    from testbed.cli.outputs import out_root as out_dir
    from testbed.experiment import calibrate

    out_root = out_dir(args.out)
    levels = calibrate.parse_levels(args.levels)
    status, doc, sweep_dir = calibrate.run_calibration(args.experiment, overrides_from_args(args), levels, out_root,
                                                       log=_stderr)
    print_result(doc, calibrate.table(doc), sweep_dir, args.json)
    return status


def _experiment_options(p) -> None:
    from testbed import backends
    from testbed.fabric.routing import POLICIES
    from testbed.paths import REPORTS
    from traffic.model import placement, schedule
    from traffic.runtime.agent import CONNECTION_MODES

    shared = add_fabric_and_link_options(p)
    p.add_argument("experiment", nargs="?", metavar="EXPERIMENT.yaml",
                   help="experiment file (default: the built-in defaults, as experiments/default.yaml)")
    p.add_argument("--fabrics", help="comma list, e.g. zcube,roft")
    p.add_argument("--backend", choices=list(backends.NAMES),
                   help="what carries the messages: emulated (default; root) or ideal (no fabric, no root)")
    p.add_argument("--pfc", choices=["on", "off"], help="priority flow control")
    p.add_argument("--trace", help="trace file, plain or .gz (relative to the current folder)")
    p.add_argument("--start", help="trace time where the slice starts, e.g. 600s")
    p.add_argument("--duration", help="trace time replayed, e.g. 120s")
    p.add_argument("--first", type=int, help="at most this many requests")
    p.add_argument("--speed", type=float, help="replay the trace this many times faster")
    p.add_argument("--model")
    p.add_argument("--prefill-tp", type=int)
    p.add_argument("--decode-tp", type=int)
    p.add_argument("--prefill-fraction", type=float, help="share of the servers running prefill")
    p.add_argument("--scheduler", choices=list(placement.POLICIES))
    p.add_argument("--mode", choices=list(schedule.MODES))
    p.add_argument("--chunk", help="slice size in emulated bytes (0: no slicing)")
    p.add_argument("--policy", choices=list(POLICIES))
    p.add_argument("--connections", choices=list(CONNECTION_MODES),
                   help="agents' TCP connections: one per NIC port pair (default) or one per transfer")
    p.add_argument("--driver", choices=["plan", "live"],
                   help="plan: KV transfers timed from the trace; live: serving with the network in the loop")
    p.add_argument("--arrivals", choices=["trace", "closed"], help="live: trace-timed or closed-loop arrivals")
    p.add_argument("--concurrency", type=int, help="live, closed loop: requests in flight")
    p.add_argument("--dilation", type=float, help="live: the emulated world runs this many times slower")
    p.add_argument("--seed", type=int, help="seed of repetition 1 (repetition r: seed + r - 1)")
    p.add_argument("--reps", type=int, help="repetitions")
    p.add_argument("--cross", type=int, metavar="N", help="background iperf3 flows")
    p.add_argument("--represents", help="the real link one emulated link stands for, e.g. 100gbit (default 400gbit)")
    p.add_argument("--name", help="run-id suffix (default: the experiment file's name)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="any experiment key, e.g. --set pfc.xoff_bytes=30000 (repeatable; applied last)")
    p.add_argument("--out", default=str(REPORTS), help="an existing folder where run directories go (default reports/)")
    p.add_argument("--dry-run", action="store_true", help="print the resolved experiment and exit")
    p.set_defaults(_shared=shared, **dict.fromkeys(shared))


def register(sub) -> None:
    p = sub.add_parser("run", help="run an experiment: the same trace slice on every fabric, repeated; report.html")
    _experiment_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("sweep", help="one run per point of a grid: sweep EXP.yaml --param link.rate=3mbit,4mbit")
    _experiment_options(p)
    p.add_argument("--param", action="append", metavar="KEY=V1,V2",
                   help="a dotted experiment key and its values (one or two --param)")
    p.add_argument("--slo-ttft", metavar="SECONDS",
                   help="also report the SLO goodput: the highest value of the first key whose TTFT P99 stays "
                        "within this, e.g. 2s")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("calibrate", help="find the load where ROFT's 100 vs 200 Gbit/s ablation matches the seed's")
    _experiment_options(p)
    p.add_argument("--levels", default="128,256,384",
                   help="serving.concurrency levels to try (default 128,256,384)")
    p.add_argument("--json", action="store_true", help="print the calibration document as JSON")
    p.set_defaults(func=cmd_calibrate)
