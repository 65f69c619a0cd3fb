"""The experiment verbs ``run``, ``sweep``, ``calibrate``: experiment file + flags -> ``testbed.experiment``'s
``run`` / ``sweep`` / ``calibrate``.

Flags override file values, and only the flags the user actually gave: every
flag (``testbed.cli.flags``: one table of flag -> key path, shared with ``replay``)
defaults to None, so an absent flag never overwrites a file value with a default.
Each applied flag is recorded as an override in experiment.json.
"""

from __future__ import annotations

import json
import sys

from common.errors import TestbedError
from testbed.cli import flags
from testbed.cli.options import print_result


def overrides_from_args(args) -> list:
    """The flags the user gave, as overrides (``testbed.cli.flags.RUN`` order), then every --set in order;
    ``run --hosts FILE`` is the experiment's ``hosts`` key, recorded like any other."""
    import os

    from testbed.experiment.schema import Override

    given = flags.overrides(args, flags.RUN)
    if getattr(args, "hosts", None):
        given.append(Override("hosts", os.path.abspath(args.hosts), "--hosts"))
    return given


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cmd_run(args) -> int:
    from testbed.cli.outputs import out_root as out_dir
    from testbed.experiment import run
    from testbed.experiment.schema import resolve

    out_root = out_dir(args.out)  # checked before anything is built, also by --dry-run
    resolved = resolve(args.experiment, overrides_from_args(args))
    if args.dry_run:
        from testbed.report.workload import served_text

        exp = resolved.experiment
        served = run.served(exp)
        print(json.dumps(resolved.as_dict() | {"served": served, "runs": [t.as_dict() for t in run.targets(exp)],
                                               "estimate_s": round(run.estimate_s(exp, resolved.backend))},
                         indent=1))
        _stderr(f"serving: {served_text(served)}")
        _stderr(f"estimated wall time: {run.estimate_text(exp, resolved.backend)}")
        return 0
    return run.run_experiment(resolved, out_root, log=_stderr)


def cmd_sweep(args) -> int:
    from testbed.cli.outputs import out_root as out_dir
    from testbed.experiment import sweep

    out_root = out_dir(args.out)  # checked before anything is built, also by --dry-run
    paired = False
    if args.param:
        params = [sweep.parse_param(p) for p in args.param]
    else:  # the file's own grid
        from testbed.experiment.schema import resolve

        exp = resolve(args.experiment, []).experiment if args.experiment else None
        grid, paired = (exp.sweep, exp.sweep_paired) if exp else (None, False)
        if not grid:
            raise TestbedError("sweep needs --param KEY=V1,V2 (one or two), e.g. --param link.rate=3mbit,4mbit, "
                               "or an experiment file with a sweep: {key: [values]} grid")
        params = [sweep.parse_param(f"{k}={','.join(str(v) for v in vals)}") for k, vals in grid.items()]
    overrides = overrides_from_args(args)
    if args.dry_run:
        points = sweep.resolve_points(args.experiment, overrides, params, paired)
        print(json.dumps([{"point": sweep.point_name(p), "experiment": r.experiment.model_dump(mode="json")}
                          for p, r in points], indent=1))
        return 0
    slo = None
    if args.slo_ttft is not None:
        from common.units import parse_seconds

        slo = parse_seconds(args.slo_ttft) * 1e3
    return sweep.run_sweep(args.experiment, overrides, params, out_root, log=_stderr, slo_ttft_ms=slo,
                           paired=paired)[0]


def cmd_calibrate(args) -> int:
    from testbed.cli.outputs import out_root as out_dir
    from testbed.experiment import calibrate

    out_root = out_dir(args.out)
    levels = calibrate.parse_levels(args.levels)
    status, doc, sweep_dir = calibrate.run_calibration(args.experiment, overrides_from_args(args), levels, out_root,
                                                       refine=args.refine, log=_stderr)
    print_result(doc, calibrate.table(doc), sweep_dir, args.json)
    return status


def experiment_options(p) -> None:
    from common.paths import REPORTS

    p.add_argument("experiment", nargs="?", metavar="EXPERIMENT.yaml",
                   help="experiment file (default: experiments/default.yaml); a key the file leaves out takes the "
                        "schema's default, a planned replay of llama-3.1-70b (experiments/kv-replay.yaml spells them "
                        "out)")
    flags.add_flags(p, flags.RUN)
    flags.add_set(p)
    p.add_argument("--out", default=str(REPORTS), help="an existing folder where run directories go (default reports/)")
    p.add_argument("--dry-run", action="store_true", help="print the resolved experiment and exit")


def register(sub) -> None:
    p = sub.add_parser("run", help="run an experiment: the same trace slice on every fabric, repeated; report.html")
    experiment_options(p)
    p.add_argument("--hosts", metavar="FILE", help="run on the fabric spread over the hosts of this file "
                   "(docs/multihost.md)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("sweep", help="one run per point of a grid: sweep EXP.yaml --param link.rate=3mbit,4mbit")
    experiment_options(p)
    p.add_argument("--param", action="append", metavar="KEY=V1,V2",
                   help="a dotted experiment key and its values (one or two --param)")
    p.add_argument("--slo-ttft", metavar="SECONDS",
                   help="also report the SLO goodput: the highest value of the first key whose TTFT P99 stays "
                        "within this, e.g. 2s")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("calibrate", help="find the load where ROFT's 100 vs 200 Gbit/s ablation matches the seed's")
    experiment_options(p)
    p.add_argument("--levels", default="128,256,384",
                   help="serving.concurrency levels to try first (default 128,256,384)")
    p.add_argument("--refine", type=int, default=0, metavar="ROUNDS",
                   help="then this many rounds of the midpoints around the closest level so far (default 0)")
    p.add_argument("--json", action="store_true", help="print the calibration document as JSON")
    p.set_defaults(func=cmd_calibrate)
