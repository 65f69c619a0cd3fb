"""``bench exchange [zcube|roft]``: the default workload's expert-parallel exchanges, one at a time on an idle
fabric, against their ideal (``testbed.bench.exchange``)."""

from __future__ import annotations

from testbed.cli.bench.common import add_common, log, preflight
from testbed.cli.bench.lateness import sized
from testbed.cli.options import print_result


def cmd(args) -> int:
    import time
    from pathlib import Path

    from common.paths import REPORTS
    from testbed.bench import exchange
    from testbed.experiment.schema import repetition_spec, resolve

    preflight(args)
    exp = resolve(None, sized(args)).experiment  # the default experiment's workload and links
    out = Path(args.logs) if args.logs else REPORTS / f"bench-exchange-{args.fabric}-{time.strftime('%Y%m%d-%H%M%S')}"
    doc = exchange.bench(repetition_spec(exp, args.fabric), out, log=log)
    print_result(doc, exchange.table(doc), out, args.json)
    return 0


def register(sub) -> None:
    p = sub.add_parser("exchange", help="expert-parallel exchanges one at a time on an idle fabric, against ideal")
    add_common(p, logs_help="its agents' logs and bench.json (default reports/bench-exchange-*)", link=False)
    p.set_defaults(func=cmd)
