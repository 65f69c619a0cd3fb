#!/usr/bin/env python3
"""Replay benchmark: does the replay keep time as the offered load rises?

Replays the default experiment's traffic (Mooncake slice, Llama-3.1-70B TP 8 -> 2,
speed 1.5, n=32) for a short window at rising network intensity: links standing
for 400, 200, 100 and 50 Gbit/s put 1x, 2x, 4x and 8x the emulated bytes on the
same 3 Mbit/s links (``--represents``). Per level it prints the offered and the
achieved (verified) bytes and rate, start lateness p99, the agents' CPU, KV FCT
p99, and whether the replay kept time (every transfer verified, lateness p99 at
most 5 ms), then the highest level that did. A benchmark: it prints figures and
asserts nothing.

    sudo .venv/bin/python scripts/bench_replay.py [--fabric zcube] [--levels 400,200,100,50] [--duration 30]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LATENESS_GOAL_MS = 5.0


def one_level(fabric: str, gbit: float, duration_s: float, out: Path) -> dict:
    argv = [sys.executable, "-m", "testbed", "replay", fabric, "--gpus", "32", "--duration", f"{duration_s:g}s",
            "--speed", "1.5", "--decode-tp", "2", "--represents", f"{gbit:g}gbit", "--out", str(out)]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"bench_replay: replay at {gbit:g} Gbit/s failed: {proc.stderr.strip().splitlines()[-1:]}")
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    s = json.loads((run_dir / "summary.json").read_text())
    rows = list(csv.DictReader(open(run_dir / "transfers.csv")))
    offered = sum(int(r["bytes"]) for r in rows)
    starts = [float(r["scheduled_start"]) for r in rows if r["scheduled_start"]]
    span = max(starts) - min(starts) if starts else 0.0
    lat = s["start_lateness_ms"]["p99"]
    return {"represents_gbit": gbit, "transfers": s["transfers"], "verified": s["verified"],
            "offered_bytes": offered, "achieved_bytes": s["bytes"],
            "offered_mbps": offered * 8 / span / 1e6 if span else None, "goodput_mbps": s["goodput_bps"] / 1e6,
            "lateness_p99_ms": lat, "agents_cpu_s": s.get("agents_cpu_s"), "fct_p99_ms": s["fct_ms"]["p99"],
            "max_link_utilization": s.get("max_link_utilization"),
            "kept_time": s["verified"] == s["transfers"] and lat is not None and lat <= LATENESS_GOAL_MS}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fabric", default="zcube", choices=["zcube", "roft"])
    p.add_argument("--levels", default="400,200,100,50", help="Gbit/s one emulated link stands for")
    p.add_argument("--duration", type=float, default=30.0, help="trace seconds replayed per level")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if os.geteuid() != 0:
        print("bench_replay: run as root (it builds fabrics)", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for gbit in (float(x) for x in args.levels.split(",")):
            rows.append(one_level(args.fabric, gbit, args.duration, Path(tmp)))
            if not args.json:
                r = rows[-1]
                if len(rows) == 1:
                    print(f"{'represents':>10} {'offered':>9} {'achieved':>9} {'offered':>8} {'goodput':>8} "
                          f"{'late p99':>8} {'agent CPU':>9} {'FCT p99':>8} {'max util':>8}  kept time")
                    print(f"{'Gbit/s':>10} {'MB':>9} {'MB':>9} {'Mbit/s':>8} {'Mbit/s':>8} {'ms':>8} "
                          f"{'s':>9} {'ms':>8} {'':>8}")
                print(f"{r['represents_gbit']:>10g} {r['offered_bytes'] / 1e6:>9.2f} {r['achieved_bytes'] / 1e6:>9.2f} "
                      f"{r['offered_mbps'] or 0:>8.2f} {r['goodput_mbps']:>8.2f} {r['lateness_p99_ms']:>8.2f} "
                      f"{r['agents_cpu_s'] or 0:>9.1f} {r['fct_p99_ms']:>8.1f} {r['max_link_utilization'] or 0:>8.3f}  "
                      f"{'yes' if r['kept_time'] else 'NO'}", flush=True)
    kept = [r["represents_gbit"] for r in rows if r["kept_time"]]
    if args.json:
        print(json.dumps({"fabric": args.fabric, "levels": rows,
                          "lowest_represents_kept_gbit": min(kept, default=None)}))
    else:
        print(f"{args.fabric}: kept time down to links standing for {min(kept):g} Gbit/s" if kept
              else f"{args.fabric}: kept time at no level")
    return 0


if __name__ == "__main__":
    sys.exit(main())
