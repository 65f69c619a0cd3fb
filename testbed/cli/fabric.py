"""The running fabric's verbs: ``up``, ``down``, ``exec``, ``cli``, ``status``, ``clean`` (as root)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from common.errors import TestbedError
from testbed.cli.options import add_fabric_options, add_link_options, add_pfc_options, fabric_spec


def cmd_up(args) -> int:
    from testbed.emulation import fabricctl

    if getattr(args, "hosts", None):
        from testbed.cli.hosts import cmd_up_hosts

        return cmd_up_hosts(args)

    miswire = tuple(args.miswire.split(",")) if args.miswire else None
    if miswire and len(miswire) != 2:
        raise TestbedError(f"--miswire {args.miswire!r}: expected two switch ports, e.g. sw1-eth9,sw1-eth11")
    spec = fabric_spec(args)
    st = fabricctl.up(spec.args, spec.datapath, miswire, log=lambda m: print(m, file=sys.stderr), pfc=spec.pfc,
                      failover=args.failover,
                      release=True)  # the fabric outlives this command: that is what 'up' is for
    t = st.timings
    print(f"{args.fabric} with {args.gpus} GPUs is up in {t['up_s']:.1f} s "
          f"({len(st.queues)} queues at {st.config['rate_bps'] / 1e6:g} Mbit/s, "
          f"controller pid {st.controller_pid})")
    for w in st.warnings:
        print(f"WARNING: {w}", file=sys.stderr)
    return 0


def cmd_down(args) -> int:
    from testbed.emulation import fabricctl

    if getattr(args, "hosts", None):
        from testbed.cli.hosts import cmd_clean_hosts

        return cmd_clean_hosts(args)

    t = fabricctl.down()
    print(f"down in {t['down_s']:.1f} s")
    return 0


def cmd_exec(args) -> int:
    from testbed.emulation import fabricctl

    fabricctl.require_root()
    argv = fabricctl.exec_argv(args.host, args.command[1:] if args.command[:1] == ["--"] else args.command)
    sys.stdout.flush()
    os.execvp(argv[0], argv)
    return 127  # pragma: no cover


def cmd_status(args) -> int:
    from testbed.emulation import fabricctl

    doc = fabricctl.status()
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    f, c = doc["fabric"], doc["controller"]
    print(f"{f['kind']} {f['gpus']} GPUs, {doc['config']['rate_bps'] / 1e6:g} Mbit/s links; controller pid "
          f"{c['pid']} {'alive' if c['alive'] else 'DEAD'}, {c['switches_verified']}/{c['switches']} switches "
          f"verified, {c['miss_packets']} table-miss packets")
    pfc = doc["pfc"]
    if pfc.get("enabled"):
        if not pfc.get("alive"):
            print("PFC on, but the helper is NOT running: nothing is paused or resumed")
        else:
            lat = pfc.get("pause_latency_ms") or {}
            print(f"PFC on: {pfc['pauses']} pauses, {pfc['resumes']} resumes, {len(pfc['paused_now'] or [])} "
                  f"transmitters paused now, {len(pfc['over_now'] or [])} queues over XOFF; pause latency p99 "
                  f"{lat.get('p99')} ms (status {pfc['age_s']} s old)")
    else:
        print("PFC off")
    if doc.get("faults"):
        print("FAULTS in force: " + ", ".join(f"{t} (since {s:.3f})" for t, s in doc["faults"].items()))
    busy = [q for q in doc["queues"] if q.get("backlog") or q.get("drops") or q.get("paused")]
    print(f"{len(doc['queues'])} queues; {len(busy)} with backlog, drops or paused:")
    for q in sorted(busy, key=lambda q: -q.get("backlog", 0))[:40]:
        flags = ("  PAUSED" if q.get("paused") else "") + ("  over XOFF" if q.get("over_xoff") else "")
        print(f"  {q['queue']:<12} -> {q['towards']:<10} backlog {q['backlog']:>7} B  qlen {q['qlen']:>4}  "
              f"drops {q['drops']}{flags}")
    return 0


def cmd_clean(args) -> int:
    from common.paths import REPORTS
    from testbed.emulation import clean
    from testbed.experiment.rundir import mark_killed_runs

    if getattr(args, "hosts", None):
        from testbed.cli.hosts import cmd_clean_hosts

        return cmd_clean_hosts(args)
    removed = clean.clean()
    print(f"removed {len(removed)} items" + (": " + ", ".join(removed[:12]) + (" ..." if len(removed) > 12 else "")
                                             if removed else ""))
    marked = mark_killed_runs(REPORTS)
    if marked:
        print(f"marked {len(marked)} killed run(s) interrupted: " + ", ".join(str(p) for p in marked[:5]))
    return 0


def cmd_cli(args) -> int:
    from common.errors import EnvironmentProblem

    try:
        from testbed.emulation import attach
    except ImportError as exc:
        if (exc.name or "").split(".")[0] != "mininet":
            raise
        raise EnvironmentProblem(f"Mininet is not importable ({exc}): scripts/setup.sh installs Debian's "
                                 "mininet, which the venv sees through --system-site-packages") from None
    return attach.run_cli(args.cmd)


def register(sub) -> None:
    """up, down, exec, cli, status (clean: ``register_clean``, listed after bench)."""
    from fabrics import FABRICS

    p = sub.add_parser("up", help="build a fabric, program it, verify it, leave it running")
    p.add_argument("fabric", choices=FABRICS)
    add_fabric_options(p)
    add_link_options(p)
    add_pfc_options(p)
    p.add_argument("--failover", choices=("fast", "controller"), default="fast",
                   help="fast: group buckets watch their ports, the switches move traffic off a dead cable at "
                        "once; controller: only the controller's repair does (default fast)")
    p.add_argument("--miswire", help=argparse.SUPPRESS)
    _hosts_option(p)
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("down", help="tear the running fabric down")
    _hosts_option(p)
    p.set_defaults(func=cmd_down)

    p = sub.add_parser("exec", help="run a command in an emulated GPU: exec gpu3 -- ping -c1 10.2.0.17")
    p.add_argument("host")
    p.add_argument("command", nargs="...")
    p.set_defaults(func=cmd_exec)

    p = sub.add_parser("cli", help="Mininet's CLI on the running fabric: cli [--cmd 'gpu1 ping -c1 10.2.0.2' ...]")
    p.add_argument("--cmd", action="append", default=[], metavar="LINE",
                   help="run this CLI line instead of the interactive prompt, then exit (repeatable, in order)")
    p.set_defaults(func=cmd_cli)

    p = sub.add_parser("status", help="live queue depths, drops and controller health")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)


def register_clean(sub) -> None:
    p = sub.add_parser("clean", help="remove everything this project left behind (and nothing else)")
    _hosts_option(p)
    p.set_defaults(func=cmd_clean)


def _hosts_option(p) -> None:
    p.add_argument("--hosts", metavar="FILE", help="the fabric over the hosts of this hosts file (docs/multihost.md)")
    p.add_argument("--tunnel", default="vxlan", choices=("vxlan", "gretap"), help=argparse.SUPPRESS)
