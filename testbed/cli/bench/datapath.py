"""``bench datapath``: packets per second per core through one emulated hop against the kernel's veth + Linux
bridge forwarding, in the same run (``testbed.bench.datapath``)."""

from __future__ import annotations

from testbed.cli.bench.common import log, preflight
from testbed.cli.options import print_result


def _check(args) -> None:
    from testbed.bench import datapath
    from testbed.cli.bench.common import new_logs_dir

    datapath.check(args.size, args.seconds)
    new_logs_dir(args)


def cmd(args) -> int:
    import time
    from pathlib import Path

    from common.paths import REPORTS
    from testbed.bench import datapath

    preflight(args, check=_check)
    out = Path(args.logs) if args.logs else REPORTS / f"bench-datapath-{time.strftime('%Y%m%d-%H%M%S')}"
    doc = datapath.run_bench(args.size, args.seconds, out, log)
    print_result(doc, datapath.table(doc), out, args.json)
    return 0


def register(sub) -> None:
    from testbed.bench import datapath as dp

    p = sub.add_parser("datapath", help="packets/s per core through one emulated hop vs the kernel's veth + bridge")
    p.add_argument("--size", type=int, default=dp.SIZE, help=f"UDP payload bytes (default {dp.SIZE})")
    p.add_argument("--seconds", type=float, default=dp.SECONDS, help=f"seconds a hop (default {dp.SECONDS})")
    p.add_argument("--logs", help="its folder, bench.json (default reports/bench-datapath-*)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd)
