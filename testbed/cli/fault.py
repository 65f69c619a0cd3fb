"""``fault``: take a cable, a switch or the controller down on the running fabric, and back (as root)."""

from __future__ import annotations

import json
import sys

from common.errors import TestbedError


def cmd_fault(args) -> int:
    from testbed.emulation import faults

    if args.kind == "link":
        if not 2 <= len(args.words) <= 3:
            raise TestbedError("fault link: expected one or both cable ends and down|up, e.g. "
                               "'fault link sw1:9 down' or 'fault link gpu3:p1 sw1:3 up'")
        target = "link " + " ".join(args.words[:-1])
    elif len(args.words) != (2 if args.kind == "switch" else 1):
        form = "switch NAME down|up" if args.kind == "switch" else "controller stop|start|restart"
        raise TestbedError(f"fault {args.kind}: expected 'fault {form}'")
    else:
        target = " ".join([args.kind, *args.words[:-1]])
    event = faults.inject(target, args.words[-1], log=lambda m: print(m, file=sys.stderr), wait=not args.no_wait)
    if args.json:
        print(json.dumps(event))
    else:
        restored = f"; planned paths back after {event['restored_s'] * 1e3:.0f} ms" if "restored_s" in event else ""
        print(f"{event['target']} {event['action']} in {event['took_s'] * 1e3:.1f} ms{restored}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("fault", help="fail a cable, a switch or the controller: fault link sw1:9 down, "
                                     "fault switch sw3 up, fault controller restart")
    p.add_argument("kind", choices=("link", "switch", "controller"))
    p.add_argument("words", nargs="+", metavar="ARG",
                   help="link: one or both cable ends (sw1:9, gpu3:p1) then down|up; switch: NAME down|up; "
                        "controller: stop|start|restart")
    p.add_argument("--no-wait", action="store_true",
                   help="after 'up', do not wait for the controller to put the planned paths back")
    p.add_argument("--json", action="store_true", help="print the event as JSON")
    p.set_defaults(func=cmd_fault)
