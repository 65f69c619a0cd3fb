"""The ``spread`` verb: ``testbed spread [EXPERIMENT] [--outcomes 20] [--backend ns3] [flags]`` ->
``testbed.experiment.spread``: ZCube once and ROFT once per ECMP outcome (hash_seed 1 .. N), the distribution
of ROFT's figures and of the ZCube/ROFT ratios over the outcomes; the spread directory last."""

from __future__ import annotations

import sys


def cmd_spread(args) -> int:
    from testbed.cli.options import print_result
    from testbed.cli.outputs import out_root as out_dir
    from testbed.cli.run import overrides_from_args
    from testbed.experiment import spread

    out_root = out_dir(args.out)
    status, doc, spread_dir = spread.run_spread(args.experiment, overrides_from_args(args), args.outcomes, out_root,
                                                log=lambda m: print(m, file=sys.stderr, flush=True))
    print_result(doc, spread.table(doc), spread_dir, args.json)
    return status


def register(sub) -> None:
    from testbed.cli.run import experiment_options

    p = sub.add_parser("spread", help="ZCube once, ROFT once per ECMP hash outcome: is ROFT's result a lottery?")
    experiment_options(p)
    p.add_argument("--outcomes", type=int, default=20, help="ROFT's ECMP outcomes: hash_seed 1 .. N (default 20)")
    p.add_argument("--json", action="store_true", help="print the spread document as JSON")
    p.set_defaults(func=cmd_spread)
