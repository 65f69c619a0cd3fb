"""The fabric model's verbs: ``plan``, ``path``, ``cost`` (no root, nothing is built)."""

from __future__ import annotations

import json
from pathlib import Path

from fabrics import describe
from testbed.cli.options import add_fabric_options, fabric_from


def cmd_plan(args) -> int:
    from fabrics.draw import draw
    from testbed.cli.outputs import require_file, writing

    fabrics = [fabric_from(args, kind) for kind in dict.fromkeys(args.fabric)]
    if args.graph:
        out = Path(args.graph)
        targets = [out if len(fabrics) == 1 else out.with_name(f"{out.stem}-{f.kind}{out.suffix}") for f in fabrics]
        for target in targets:  # every picture's place is checked before the first is drawn
            require_file(target, "--graph")
        for f, target in zip(fabrics, targets):
            with writing(target, "--graph"):
                draw(f, target)
            if not args.json:
                print(f"wrote {target}")
    placements = None
    if getattr(args, "hosts", None):  # several machines: where each switch and GPU goes
        from testbed.cli.hosts import print_placement

        placements = print_placement(args, fabrics)
        if not args.json:
            return 0
    if args.json:
        if placements is not None:
            print(json.dumps({"placements": placements}, indent=1))
            return 0
        if len(fabrics) == 1:
            print(json.dumps(describe.plan_json(fabrics[0]), indent=1))
        else:
            from fabrics.cost import cost_of, ratios

            doc = {"plans": {f.kind: describe.plan_json(f) for f in fabrics}}
            if len(fabrics) == 2:
                doc["ratios"] = ratios(cost_of(fabrics[0]), cost_of(fabrics[1]))
            print(json.dumps(doc, indent=1))
        return 0
    for f in fabrics:
        print(describe.plan_text(f))
        print()
    if len(fabrics) == 2:
        print(describe.comparison_text(fabrics[0], fabrics[1]))
    return 0


def cmd_path(args) -> int:

    f = fabric_from(args, args.fabric)
    if args.json:
        print(json.dumps(describe.path_json(f, args.src, args.dst, args.policy)))
    else:
        print(describe.path_text(f, args.src, args.dst, args.policy))
    return 0


def cmd_cost(args) -> int:
    from fabrics.cost import cost_table

    rows = cost_table()
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    head = (f"{'scale':<18}{'fabric':<7}{'switches':>9}{'ports':>8}{'cables':>8}{'optics':>8}"
            f"{'sw-sw optics':>13}{'capex':>9}")
    print(head)
    for row in rows:
        for kind in ("zcube", "roft", "ratio"):
            c = row[kind]
            fmt = (lambda v: f"{v:.2f}") if kind == "ratio" else (lambda v: f"{v:g}")
            print(f"{row['scale'] if kind == 'zcube' else '':<18}{kind:<7}{fmt(c['switches']):>9}"
                  f"{fmt(c['switch_ports']):>8}{fmt(c['cables']):>8}{fmt(c['transceivers']):>8}"
                  f"{fmt(c['fabric_transceivers']):>13}{fmt(c['capex_units']):>9}")
    return 0


def register(sub) -> None:
    from fabrics import FABRICS
    from fabrics.routing import DEFAULT_POLICY, POLICIES

    p = sub.add_parser("plan", help="summarise a fabric: switches, cables, oversubscription, cost")
    p.add_argument("fabric", nargs="+", choices=FABRICS)
    add_fabric_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--graph", metavar="FILE", help="draw the topology (.png, .svg, .pdf, .dot, .mmd)")
    p.add_argument("--hosts", metavar="FILE", help="place the fabric on the machines of a hosts file: switches and "
                   "GPUs per host, cross-host cables (nothing is built)")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("path", help="the switch hops a transfer between two GPUs takes")
    p.add_argument("fabric", choices=FABRICS)
    add_fabric_options(p)
    p.add_argument("--src", type=int, required=True, help="source GPU (from 1)")
    p.add_argument("--dst", type=int, required=True, help="destination GPU (from 1)")
    p.add_argument("--policy", default=DEFAULT_POLICY, choices=list(POLICIES),
                   help=f"NIC port selection (default {DEFAULT_POLICY})")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_path)

    p = sub.add_parser("cost", help="capex table of both fabrics at n=32, 64, 1024, 16384")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cost)
