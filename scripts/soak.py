#!/usr/bin/env python3
"""Soak benchmark: nothing of ours leaks, whatever happens to a run.

Runs short replays (``experiments/smoke.yaml``: n=16, 10 s of trace, two iperf3
cross flows so agents and iperf3 are both running) alternating ZCube and ROFT.
In a quarter of the runs it sends SIGINT mid-replay, in another quarter SIGKILL
followed by ``testbed clean`` (each fabric gets both); the rest finish. After each it prints what of
ours is left (``testbed.emulation.inventory``: namespaces, links, bridges,
processes, pinned maps, machine settings) and the run directory's state, then
a total. A benchmark, not a test: it prints figures and exits 1 if anything
leaked or a run directory was lost.

    sudo .venv/bin/python scripts/soak.py [--runs 20] [--out reports/soak-<time>]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from testbed.emulation import inventory  # noqa: E402

SMOKE = REPO / "experiments" / "smoke.yaml"


def plan_actions(runs: int) -> list[str]:
    """Per run (fabrics alternate zcube, roft, ...): a period of 8 that interrupts and kills each
    fabric once, so 20 runs have 5 SIGINT and 5 SIGKILL, both fabrics hit by both."""
    period = ["finish", "sigint", "finish", "sigkill", "sigint", "finish", "sigkill", "finish"]
    return [period[i % len(period)] for i in range(runs)]


def wait_mid_replay(proc: subprocess.Popen, out: Path, timeout_s: float = 120) -> bool:
    """Until agents are listening in some run under ``out`` and the replay has sent something."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        sent = [p for p in out.glob("*/runs/*/rep*/agents/*.sent.jsonl") if p.stat().st_size > 0]
        if sent:
            time.sleep(1.0)
            return True
        time.sleep(0.2)
    return False


def one_run(i: int, fabric: str, action: str, out: Path, baseline: dict) -> dict:
    run_out = out / f"run{i:02d}-{fabric}-{action}"
    run_out.mkdir(parents=True)
    argv = [sys.executable, "-m", "testbed", "run", str(SMOKE), "--fabrics", fabric, "--out", str(run_out),
            "--set", "cross_flows=2"]
    t0 = time.monotonic()
    with open(run_out / "run.log", "w") as log:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        hit = True
        if action != "finish":
            hit = wait_mid_replay(proc, run_out)
            proc.send_signal(signal.SIGINT if action == "sigint" else signal.SIGKILL)
        try:
            rc = proc.wait(timeout=600)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
    cleaned = None
    if action == "sigkill":
        c = subprocess.run([sys.executable, "-m", "testbed", "clean"], cwd=REPO, capture_output=True, text=True)
        cleaned = c.stdout.strip().splitlines()[0] if c.stdout.strip() else c.stderr.strip()
    left = inventory.leftovers(baseline)
    dirs = [p for p in run_out.iterdir() if p.is_dir()]
    states = [json.loads((d / "lifecycle.json").read_text()).get("state") if (d / "lifecycle.json").is_file()
              else None for d in dirs]
    return {"run": i, "fabric": fabric, "action": action, "hit_mid_replay": hit, "rc": rc,
            "wall_s": round(time.monotonic() - t0, 1), "leftovers": left, "run_dirs": len(dirs),
            "states": states, "clean": cleaned}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--out", type=Path, default=REPO / "reports" / time.strftime("soak-%Y%m%d-%H%M%S"))
    args = p.parse_args()
    if os.geteuid() != 0:
        print("soak: run as root (it builds fabrics)", file=sys.stderr)
        return 2
    baseline = inventory.host_settings()
    before = inventory.leftovers()
    if before:
        print(f"soak: something of ours exists before the first run ({before[0]}, ...): run 'testbed clean' first",
              file=sys.stderr)
        return 2
    rows = []
    print(f"{'run':>3} {'fabric':<6} {'action':<8} {'rc':>4} {'wall s':>7} {'leftovers':>9}  run dir state")
    for i, action in enumerate(plan_actions(args.runs), 1):
        fabric = "zcube" if i % 2 else "roft"
        r = one_run(i, fabric, action, args.out, baseline)
        rows.append(r)
        state = ",".join(str(s) for s in r["states"]) or "LOST"
        print(f"{i:>3} {fabric:<6} {action:<8} {r['rc']:>4} {r['wall_s']:>7} {len(r['leftovers']):>9}  {state}"
              + ("" if r["hit_mid_replay"] else "  (signal missed the replay)")
              + (f"  [{'; '.join(r['leftovers'][:3])}]" if r["leftovers"] else ""), flush=True)
    leaked = sum(len(r["leftovers"]) for r in rows)
    lost = sum(1 for r in rows if r["run_dirs"] != 1 or r["states"][0] not in ("finished", "interrupted", "failed"))
    wrong = sum(1 for r in rows if r["action"] != "finish" and r["states"] and r["states"][0] != "interrupted")
    (args.out / "soak.json").write_text(json.dumps(rows, indent=1))
    print(f"total: {len(rows)} runs, {leaked} leftovers, {lost} lost run directories, "
          f"{wrong} killed runs not marked interrupted ({args.out / 'soak.json'})")
    return 1 if leaked or lost or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
