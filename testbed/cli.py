"""Command line: `python -m testbed <verb> ...`.

Every verb is a function taking the parsed arguments and returning an exit
status. A ``TestbedError`` becomes one line on stderr (exit 2, or the error's
own status); argparse mistakes likewise, without the usage dump; so does an
``OSError`` (exit 2, naming the path, or the verb's output flag when the OS
names none, e.g. a full disk during a write).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

from testbed.errors import TestbedError


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # noqa: D401 - argparse API
        self.exit(2, f"{self.prog}: error: {message}\n")


def add_fabric_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpus", type=int, default=32, help="number of GPUs n (default 32)")
    p.add_argument("--gpus-per-switch", type=int, default=8, help="ZCube k (default 8)")
    p.add_argument("--cables", type=int, default=None,
                   help="ZCube parallel cables per odd-even pair (default k^2/n when whole, else 1)")
    p.add_argument("--gpus-per-server", type=int, default=8, help="ROFT server size (default 8)")
    p.add_argument("--radix", type=int, default=None,
                   help="ROFT switch radix (default: the radix of the ZCube with the same n, k)")


def fabric_from(args: argparse.Namespace, kind: str):
    from testbed.fabric import build_fabric

    return build_fabric(kind, gpus=args.gpus, gpus_per_switch=args.gpus_per_switch, cables=args.cables,
                        gpus_per_server=args.gpus_per_server, radix=args.radix)


# ---------------------------------------------------------------- verbs
def cmd_plan(args) -> int:
    from testbed import plan
    from testbed.fabric.draw import draw
    from testbed.outputs import require_file, writing

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
    if args.json:
        if len(fabrics) == 1:
            print(json.dumps(plan.plan_json(fabrics[0]), indent=1))
        else:
            from testbed.fabric.cost import cost_of, ratios

            doc = {"plans": {f.kind: plan.plan_json(f) for f in fabrics}}
            if len(fabrics) == 2:
                doc["ratios"] = ratios(cost_of(fabrics[0]), cost_of(fabrics[1]))
            print(json.dumps(doc, indent=1))
        return 0
    for f in fabrics:
        print(plan.plan_text(f))
        print()
    if len(fabrics) == 2:
        print(plan.comparison_text(fabrics[0], fabrics[1]))
    return 0


def cmd_path(args) -> int:
    from testbed import plan

    f = fabric_from(args, args.fabric)
    if args.json:
        print(json.dumps(plan.path_json(f, args.src, args.dst, args.policy)))
    else:
        print(plan.path_text(f, args.src, args.dst, args.policy))
    return 0


def cmd_cost(args) -> int:
    from testbed.fabric.cost import cost_table

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


# --------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    from testbed.fabric import FABRICS
    from testbed.fabric.routing import DEFAULT_POLICY, POLICIES

    parser = OneLineParser(prog="testbed", description="ZCube vs rail-optimized fat-tree testbed")
    sub = parser.add_subparsers(dest="verb", required=True, parser_class=OneLineParser)

    p = sub.add_parser("plan", help="summarise a fabric: switches, cables, oversubscription, cost")
    p.add_argument("fabric", nargs="+", choices=FABRICS)
    add_fabric_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--graph", metavar="FILE", help="draw the topology (.png, .svg, .pdf, .dot, .mmd)")
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

    from testbed import emulation_cli, replay_cli, run_cli

    emulation_cli.register(sub, add_fabric_options)
    replay_cli.register(sub, add_fabric_options, emulation_cli.add_link_options)
    run_cli.register(sub, add_fabric_options, emulation_cli.add_link_options)
    from testbed.report import cli as report_cli

    report_cli.register(sub)
    return parser


def _interrupt(signum, frame):
    raise KeyboardInterrupt


# the flags naming where a verb writes, for an OSError that names no file (a full disk during a write)
OUTPUT_FLAGS = ("graph", "out", "logs", "html")


def _output_of(args) -> str | None:
    for dest in OUTPUT_FLAGS:
        value = getattr(args, dest, None)
        if isinstance(value, str) and value:
            return f"--{dest} {value}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # 'kill' cleans up like Ctrl-C does
    try:
        return args.func(args) or 0
    except TestbedError as exc:
        print(f"testbed: error: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        print("testbed: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into head & co.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a path the user gave (or the disk) refused: one line, never a traceback
        from testbed.outputs import os_error_line

        print(f"testbed: error: {os_error_line(exc, _output_of(args))}", file=sys.stderr)
        return 2
