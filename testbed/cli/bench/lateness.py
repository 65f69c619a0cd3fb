"""``bench lateness [zcube|roft]``: does the live serving keep time as the load rises (``testbed.bench.lateness``)?"""

from __future__ import annotations

from testbed.cli.bench.common import add_common, log, preflight
from testbed.cli.options import print_result


def sized(args) -> list:
    """The default experiment at the fabric flags' size: --gpus, --gpus-per-switch, --gpus-per-server
    (servers are the serving layout's too: half of them prefill, half decode)."""
    from testbed.experiment.schema import Override

    return [Override(key, getattr(args, key), f"--{key.replace('_', '-')}")
            for key in ("gpus", "gpus_per_switch", "gpus_per_server")]


def _check(args) -> None:
    from testbed.bench.lateness import parse_levels
    from testbed.cli.outputs import require_dir

    parse_levels(args.levels)
    if args.logs:
        require_dir(args.logs, "--logs")


def cmd(args) -> int:
    from common.paths import REPORTS
    from testbed.bench import lateness as lateness_bench
    from testbed.cli.outputs import out_root, require_dir

    preflight(args, check=_check)
    levels = lateness_bench.parse_levels(args.levels)
    duration = args.duration if args.duration is not None else lateness_bench.DURATION_S
    root = require_dir(args.logs, "--logs") if args.logs else out_root(REPORTS)
    status, doc = lateness_bench.run_bench(args.fabric, levels, duration, root, sized(args), log=log)
    print_result(doc, lateness_bench.table(doc), doc["dir"], args.json)
    return status


def register(sub) -> None:
    p = sub.add_parser("lateness", help="the default experiment, one short run per level of requests in flight")
    add_common(p, logs_help="the folder its sweep directory goes in (default reports/)", link=False)
    p.add_argument("--levels", help="requests in flight per level (default 1,64,128,192,256)")
    p.add_argument("--duration", type=float, help="cluster seconds per level (default 8)")
    p.set_defaults(func=cmd)
