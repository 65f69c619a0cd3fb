"""``bench control-path [zcube|roft]``: the order path's wall milliseconds at a given load, hosted agents against
agent processes (``testbed.bench.control_path``)."""

from __future__ import annotations

from testbed.cli.bench.common import add_common, log, preflight
from testbed.cli.bench.lateness import sized
from testbed.cli.options import print_result


def _check(args) -> None:
    from testbed.bench import control_path
    from testbed.cli.bench.common import new_logs_dir

    control_path.parse_paths(args.path)
    control_path.check(args.rate, args.burst, args.bytes, args.duration)
    new_logs_dir(args)


def cmd(args) -> int:
    import time
    from pathlib import Path

    from common.paths import REPORTS
    from testbed.bench import control_path
    from testbed.experiment.schema import repetition_spec, resolve

    preflight(args, check=_check)
    exp = resolve(None, sized(args)).experiment  # the default experiment's fabric, links and PFC
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.logs) if args.logs else REPORTS / f"bench-control-path-{args.fabric}-{stamp}"
    doc = control_path.run_bench(repetition_spec(exp, args.fabric), control_path.parse_paths(args.path), args.rate,
                                 args.burst, args.bytes, args.duration, out, log)
    print_result(doc, control_path.table(doc), out, args.json)
    return 0 if all(p["delivered"] == p["ordered"] for p in doc["paths"].values()) else 1


def register(sub) -> None:
    from testbed.bench import control_path as cp

    p = sub.add_parser("control-path", help="order -> wire latency at a given load: one process for the cluster and "
                                            "its agents against one process per agent")
    add_common(p, logs_help="its run directories and bench.json (default reports/bench-control-path-*)", link=False)
    p.add_argument("--rate", type=float, default=cp.ORDERS_PER_S,
                   help=f"orders per second (default {cp.ORDERS_PER_S:g})")
    p.add_argument("--burst", type=int, default=cp.BURST, help=f"orders a burst (default {cp.BURST})")
    p.add_argument("--bytes", type=int, default=cp.BYTES, help=f"bytes a message (default {cp.BYTES})")
    p.add_argument("--duration", type=float, default=cp.DURATION_S,
                   help=f"wall seconds a path (default {cp.DURATION_S:g})")
    p.add_argument("--path", help=f"the paths to time (default {','.join(cp.PATHS)})")
    p.set_defaults(func=cmd)
