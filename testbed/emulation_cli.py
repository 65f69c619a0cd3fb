"""CLI verbs of the emulated fabric (up, down, exec, cli, status, clean) and its benchmarks (bench).

Above ``testbed.emulation`` and ``testbed.bench`` (the verbs drive both), beside the other verb modules.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from testbed import scale
from testbed.errors import TestbedError
from testbed.units import parse_rate, parse_size


def fabric_kwargs(args) -> dict:
    if args.fabric == "zcube":
        return {"kind": "zcube", "gpus": args.gpus, "gpus_per_switch": args.gpus_per_switch, "cables": args.cables}
    return {"kind": args.fabric, "gpus": args.gpus, "gpus_per_switch": args.gpus_per_switch,
            "gpus_per_server": args.gpus_per_server, "radix": args.radix}


def datapath_config(args):
    from testbed.datapath import DatapathConfig

    return DatapathConfig(rate_bps=parse_rate(args.rate), mtu=args.mtu, buffer_bytes=parse_size(args.buffer),
                          nic_buffer_bytes=parse_size(args.nic_buffer),
                          burst_bytes=parse_size(args.burst)).validate()


def add_link_options(p) -> None:
    p.add_argument("--rate", default=f"{scale.DEFAULT_RATE_BPS / 1e6:g}mbit",
                   help=f"link rate (default {scale.DEFAULT_RATE_BPS / 1e6:g}mbit, standing for 400 Gbit/s)")
    p.add_argument("--buffer", default=str(scale.DEFAULT_BUFFER_BYTES), help="switch egress buffer per port, bytes")
    p.add_argument("--nic-buffer", default="0",
                   help=f"host NIC queue, bytes (default {scale.DEFAULT_NIC_QUEUE_PACKETS} frames, Linux's txqueuelen)")
    p.add_argument("--burst", default=str(scale.DEFAULT_BURST_BYTES), help="shaper burst, bytes")
    p.add_argument("--mtu", type=int, default=scale.DEFAULT_MTU)


def add_pfc_options(p, default: str = "off") -> None:
    p.add_argument("--pfc", default=default, choices=["on", "off"],
                   help=f"PFC-style pause from queue thresholds (default {default})")
    p.add_argument("--pfc-xoff", help="XOFF threshold per switch queue, bytes (default half the buffer)")
    p.add_argument("--pfc-xon", help="XON threshold, bytes (default XOFF - 2 frames)")
    p.add_argument("--pfc-headroom", help="headroom per feeding link, bytes (default: 2 frames + 2 ms at the rate)")
    p.add_argument("--pfc-poll-us", type=int, help="PFC helper poll interval, microseconds (default 500)")
    p.add_argument("--pfc-alpha", type=_alpha, help="dynamic threshold: XOFF = ALPHA x the switch's free shared "
                   "buffer (1/128 .. 8, e.g. 0.5 or 1/8; default: static thresholds)")


def _alpha(text: str) -> float:
    from fractions import Fraction

    try:
        return float(Fraction(text))
    except (ValueError, ZeroDivisionError):
        import argparse

        raise argparse.ArgumentTypeError(f"{text!r} is not a number (e.g. 0.5 or 1/8)") from None


def pfc_config(args):
    """The PfcConfig the flags ask for (None when the parser has no PFC flags)."""
    if not hasattr(args, "pfc"):
        return None
    from controller.pfc.policy import PfcConfig

    kw = {"enabled": args.pfc == "on"}
    for flag, key in (("pfc_xoff", "xoff_bytes"), ("pfc_xon", "xon_bytes"), ("pfc_headroom", "headroom_bytes")):
        if getattr(args, flag, None) is not None:
            kw[key] = parse_size(getattr(args, flag))
    if getattr(args, "pfc_poll_us", None) is not None:
        kw["poll_us"] = args.pfc_poll_us
    if getattr(args, "pfc_alpha", None) is not None:
        kw["dynamic_alpha"] = args.pfc_alpha
    return PfcConfig(**kw)


def cmd_up(args) -> int:
    from testbed.emulation import fabricctl

    miswire = tuple(args.miswire.split(",")) if args.miswire else None
    if miswire and len(miswire) != 2:
        raise TestbedError(f"--miswire {args.miswire!r}: expected two switch ports, e.g. sw1-eth9,sw1-eth11")
    st = fabricctl.up(fabric_kwargs(args) | {"kind": args.fabric}, datapath_config(args), miswire,
                      log=lambda m: print(m, file=sys.stderr), pfc=pfc_config(args))
    t = st["timings"]
    print(f"{args.fabric} with {args.gpus} GPUs is up in {t['up_s']:.1f} s "
          f"({len(st['queues'])} queues at {st['config']['rate_bps'] / 1e6:g} Mbit/s, "
          f"controller pid {st['controller_pid']})")
    for w in st["warnings"]:
        print(f"WARNING: {w}", file=sys.stderr)
    return 0


def cmd_down(args) -> int:
    from testbed.emulation import fabricctl

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
    busy = [q for q in doc["queues"] if q.get("backlog") or q.get("drops") or q.get("paused")]
    print(f"{len(doc['queues'])} queues; {len(busy)} with backlog, drops or paused:")
    for q in sorted(busy, key=lambda q: -q.get("backlog", 0))[:40]:
        flags = ("  PAUSED" if q.get("paused") else "") + ("  over XOFF" if q.get("over_xoff") else "")
        print(f"  {q['queue']:<12} -> {q['towards']:<10} backlog {q['backlog']:>7} B  qlen {q['qlen']:>4}  "
              f"drops {q['drops']}{flags}")
    return 0


def cmd_clean(args) -> int:
    from testbed.emulation import fabricctl
    from testbed.paths import REPORTS
    from testbed.run import mark_killed_runs

    removed = fabricctl.clean()
    print(f"removed {len(removed)} items" + (": " + ", ".join(removed[:12]) + (" ..." if len(removed) > 12 else "")
                                             if removed else ""))
    marked = mark_killed_runs(REPORTS)
    if marked:
        print(f"marked {len(marked)} killed run(s) interrupted: " + ", ".join(str(p) for p in marked[:5]))
    return 0


def cmd_cli(args) -> int:
    from testbed.errors import EnvironmentProblem

    try:
        from testbed.emulation import attach
    except ImportError as exc:
        if (exc.name or "").split(".")[0] != "mininet":
            raise
        raise EnvironmentProblem(f"Mininet is not importable ({exc}): scripts/setup.sh installs Debian's "
                                 "mininet, which the venv sees through --system-site-packages") from None
    return attach.run_cli(args.cmd)


def cmd_bench_pfc(args) -> int:
    import time
    from pathlib import Path

    from testbed.bench import pfc as pfc_bench
    from testbed.paths import REPORTS

    fargs = fabric_kwargs(args) | {"kind": args.fabric or "zcube"}
    stamp = time.strftime('%Y%m%d-%H%M%S')
    out = Path(args.logs) if args.logs else REPORTS / f"bench-pfc-{fargs['kind']}{fargs['gpus']}-{stamp}"
    doc = pfc_bench.bench(fargs, datapath_config(args), pfc_config(args), senders=args.senders,
                          seconds=args.duration, log=lambda m: print(m, file=sys.stderr), out=out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(doc, indent=1))
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    on, off = doc["incast"]["pfc_on"], doc["incast"]["pfc_off"]

    def lat(key):
        d = doc[key]
        return f"p50 {d['p50']} ms, p99 {d['p99']} ms, max {d['max']} ms ({d['n']} events)"

    print(f"{fargs['kind']} n={fargs['gpus']} at {doc['rate_bps'] / 1e6:g} Mbit/s: incast "
          f"{len(doc['incast']['senders'])} senders -> {doc['incast']['victim']}, {doc['incast']['seconds']} s")
    print(f"  pause latency   {lat('pause_latency_ms')}  (helper reaction p99 {doc['reaction_ms']['p99']} ms)")
    print(f"  resume latency  {lat('resume_latency_ms')}")
    x = on.get("xoff_threshold_bytes") or {}
    print(f"  thresholds: {doc.get('thresholds')}; XOFF at the crossings min {x.get('min')} B, "
          f"median {x.get('p50')} B, max {x.get('max')} B")
    print(f"  target: p99 within {doc['target_ms']} ms, never above 5 ms: "
          f"{'met' if doc['within_target'] else 'MISSED'}")
    for w in doc.get("warnings", []):
        print(f"  WARNING: {w}")
    h = on.get("helper", {})
    print(f"  helper: {h.get('scheduling')}; woken by the doorbell {h.get('doorbell_rings')} times, held up "
          f"over 2 ms {h.get('loop_gaps')} times (longest {h.get('loop_gap_max_ms')} ms); "
          f"vCPU steal during the incast "
          f"{on.get('vcpu_steal_pct')} %")
    for name, r in (("PFC on ", on), ("PFC off", off)):
        print(f"  {name}: {r['drops']} drops, {r['pauses']} pauses, {r['retransmits']} retransmits, goodput "
              f"{r['goodput_bps'] / 1e6:.2f} Mbit/s"
              + (f", paused: {' '.join(r['paused_nodes'])}" if r['paused_nodes'] else ""))
    sp = doc.get("spreading")
    if sp:
        print("  congestion spreading (PFC on): bystander flows, neither to nor from the incast, beside it / alone:")
        for label, want in (("to other GPUs on the hot switch", True), ("elsewhere", False)):
            r = [x for x, hot in zip(sp["ratio"], sp["to_hot_switch"]) if hot == want]
            if r:
                print(f"    {label:<33} {len(r)} flows: median {sorted(r)[len(r) // 2]:.2f}, min {min(r):.2f}")
        print(f"    {sp['queues_paused']} queues paused, {len(sp['bystander_nics_paused'])} of them bystanders' NICs")
    print(f"  pauses spread {doc['incast']['pfc_on'].get('spread', {}).get('max_hops')} hops from "
          f"{', '.join(doc['incast']['pfc_on'].get('spread', {}).get('roots', []))}; logs and per-port figures: {out}")
    if not doc["lossless"]:
        print("LOSSLESS VIOLATION: fabric queues dropped with PFC on", file=sys.stderr)
        return 1
    return 0


def check_bench_outputs(args) -> None:
    """bench pfc --logs DIR: made if missing, so DIR or else its folder must exist and take new files."""
    if args.bench == "pfc" and args.logs:
        from testbed.outputs import require_new_dir

        require_new_dir(args.logs, "--logs")


def cmd_bench(args) -> int:
    from testbed.bench import fidelity
    from testbed.emulation import fabricctl

    check_bench_outputs(args)  # a bad --logs fails before root, OVS or a fabric is needed
    fabricctl.require_root()
    fabricctl.require_ovs()
    if args.bench == "pfc":
        return cmd_bench_pfc(args)
    if args.fabric is None:
        raise TestbedError("bench fidelity needs a fabric: zcube or roft")
    fargs = fabric_kwargs(args) | {"kind": args.fabric}
    cfg = datapath_config(args)
    def log(m):
        print(m, file=sys.stderr)

    if args.sweep:
        rates = [parse_rate(r) for r in args.sweep.split(",")]
        doc = fidelity.sweep(fargs, cfg, rates, args.duration, args.omit, log, ecmp=args.ecmp)
        if args.json:
            print(json.dumps(doc, indent=1))
        else:
            best = doc["highest_rate_at_fidelity_bps"]
            print(f"capacity at fidelity: {doc['capacity_at_fidelity_bps'] / 1e6:.1f} Mbit/s total goodput"
                  + (f" at {best / 1e6:g} Mbit/s links" if best else " (no rate met the targets)"))
        return 0
    patterns = tuple(args.pattern.split(",")) if args.pattern else ("permutation", "all-to-all")
    doc = fidelity.bench(fargs, cfg, args.duration, args.omit, log, patterns, ecmp=args.ecmp)
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    if args.flows:
        for f in doc["flows"]:
            print(f"  {f['pattern']:<11} {f['src']:>6}:p{f['src_port']} -> {f['dst']:<6}:p{f['dst_port']}  goodput "
                  f"{f['goodput_bps'] / 1e6:6.3f}  ideal {f['ideal_bps'] / 1e6:6.3f} Mbit/s  ratio {f['ratio']:.3f}")
    s = doc["summary"]
    print(f"{args.fabric} n={args.gpus} at {s['rate_bps'] / 1e6:g} Mbit/s, MTU {s['mtu']}, "
          f"{s['duration_s']} s per pattern" + (f", ECMP {s['ecmp']}" if s.get("ecmp") else ""))
    for name in patterns:
        p = s[name]
        print(f"  {name:<11} {p['flows']:>5} flows: median {p['median_ratio']:.3f}, min {p['min_ratio']:.3f}, "
              "aggregate "
              f"{p['aggregate_goodput_bps'] / 1e6:6.1f} Mbit/s, {p['retransmits']} retransmits, {p['drops']} queue "
              f"drops; ovs-vswitchd {p['cpu']['ovs_vswitchd_cores']:.2f} cores, machine "
              f"{p['cpu']['machine_busy_fraction']:.0%} busy{'  CPU SATURATED' if p['cpu_saturated'] else ''}"
              + ("" if p["ideal_known"] else "  (vs the collision-free ideal: ECMP paths not learnt)"))
    print(f"bring-up {s.get('bringup_s')} s, teardown {s.get('teardown_s')} s")
    if s["cpu_saturated"]:
        print("FIDELITY WARNING: the emulator saturated the CPU; these numbers are not a result", file=sys.stderr)
    if s["targets_met"] is not None:
        print("permutation targets (median >= 0.95, min >= 0.85, not saturated): "
              + ("met" if s["targets_met"] else "MISSED"))
    return 0


def register(sub, add_fabric_options) -> None:
    from testbed.fabric import FABRICS

    p = sub.add_parser("up", help="build a fabric, program it, verify it, leave it running")
    p.add_argument("fabric", choices=FABRICS)
    add_fabric_options(p)
    add_link_options(p)
    add_pfc_options(p)
    p.add_argument("--miswire", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("down", help="tear the running fabric down")
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

    p = sub.add_parser("bench", help="benchmarks: bench fidelity zcube|roft [--sweep 2,3,4]; bench pfc [zcube|roft]")
    p.add_argument("bench", choices=["fidelity", "pfc"])
    p.add_argument("fabric", nargs="?", choices=FABRICS)
    add_fabric_options(p)
    add_link_options(p)
    p.add_argument("--duration", type=int, default=16, help="seconds of traffic (default 16)")
    p.add_argument("--senders", type=int, default=8, help="bench pfc: incast senders (default 8)")
    p.add_argument("--logs", help="bench pfc: where the pause logs and figures go (default reports/bench-pfc-...)")
    add_pfc_options(p, default="on")
    p.add_argument("--omit", type=int, default=3, help="seconds of slow start left out (default 3)")
    p.add_argument("--sweep", help="comma-separated link rates, e.g. 2,3,4,5 (Mbit/s); permutation only")
    p.add_argument("--pattern", help="comma-separated patterns (default permutation,all-to-all)")
    p.add_argument("--flows", action="store_true", help="print every flow, not only the summary")
    p.add_argument("--ecmp", choices=["spread", "hashed"], default="spread",
                   help="ROFT permutation: client ports probed so ECMP spreads the flows without collisions "
                        "(spread, default) or OVS's hash as it falls, ideal learnt per flow (hashed)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("clean", help="remove everything this project left behind (and nothing else)")
    p.set_defaults(func=cmd_clean)
