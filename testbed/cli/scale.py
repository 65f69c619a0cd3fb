"""The ``scale`` verb: ``testbed scale [EXPERIMENT] [--sizes 32,128,...] [--backend B] [--reps N] [flags]`` ->
``testbed.experiment.scale``: the experiment's per-GPU load at each size on ZCube and ROFT; the estimate first, a
progress bar over the repetitions while it runs (on a terminal), the table and the Scale page's path last."""

from __future__ import annotations

import json


def cmd_scale(args) -> int:
    from testbed.cli.outputs import out_root as out_dir
    from testbed.cli.run import overrides_from_args
    from testbed.experiment import scale
    from testbed.experiment.run import RepetitionBar

    out_root = out_dir(args.out)  # checked before anything is planned
    sizes = scale.parse_sizes(args.sizes)
    overrides = overrides_from_args(args)
    planned = scale.plan(args.experiment, overrides, sizes)  # every size checked before anything runs
    points = planned[3]
    if args.dry_run:
        print(json.dumps([{"values": dict(p), "experiment": r.experiment.model_dump(mode="json")} for p, r in points],
                         indent=1))
        return 0
    exp = points[0][1].experiment
    bar = RepetitionBar("scale")
    bar.start(len(points) * len(exp.fabrics) * exp.repetitions)
    try:
        status, _, doc = scale.run_scale(args.experiment, planned, out_root, log=bar.log,
                                         out=(lambda line: None) if args.json else print, progress=bar.step)
    finally:
        bar.stop()
    if args.json:
        print(json.dumps(doc, indent=1))
    return status


def register(sub) -> None:
    from testbed.cli.run import experiment_options
    from testbed.experiment.scale import BACKEND, SIZES

    p = sub.add_parser("scale", help="the experiment's per-GPU load at growing n on ZCube and ROFT: the ratios "
                                     "against n with their intervals, and the cost at each size")
    experiment_options(p)
    p.add_argument("--sizes", default=",".join(str(n) for n in SIZES),
                   help=f"numbers of GPUs, comma separated (default {','.join(str(n) for n in SIZES)}); each is a "
                        "gpus_per_switch: auto fabric")
    p.set_defaults(func=cmd_scale)
    p.epilog = f"--backend defaults to {BACKEND} here (not the experiment's)."
    p.add_argument("--json", action="store_true", help="print the scale document as JSON")
