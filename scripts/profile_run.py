#!/usr/bin/env python3
"""Where a run's CPU goes: run a testbed command and record the cores each role used, every second
(``testbed.bench.cpu_use``: the run's own process as ``main``, the host or the coordinator and agents, the pause
daemon, the controller, ovs-vswitchd's PMD, main thread and other threads, softirq, and what others on the
machine used). Writes the series as JSON and prints the mean over the seconds a serving process was running.

    sudo .venv/bin/python scripts/profile_run.py OUT.json -- run --reps 1 --out /tmp/runs

(docs/replay.md, "Where a default run's time goes"; add ``py-spy record -p PID -f raw`` of the main process or
the host for where inside them.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from testbed.bench import cpu_use  # noqa: E402

SERVING = ("host", "coordinator", "agents")


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") != 1:
        print("usage: profile_run.py OUT.json -- TESTBED ARGS...", file=sys.stderr)
        return 2
    out, args = Path(argv[0]), argv[2:]
    proc = subprocess.Popen([sys.executable, "-m", "testbed", *args], cwd=REPO,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    plain = cpu_use.role_of

    def role_of(pid, comm, cmd, ppid, me, launchers):
        return "main" if pid == proc.pid else "profiler" if pid == me else plain(pid, comm, cmd, ppid, me, launchers)

    cpu_use.role_of = role_of
    series, prev = [], cpu_use.snapshot()
    seen = dict(prev.per_pid)
    while proc.poll() is None:
        time.sleep(1.0)
        snap = cpu_use.snapshot()
        seen.update(snap.per_pid)
        cur = cpu_use.Snapshot(snap.t, per_pid=dict(seen), machine=snap.machine)
        series.append({"t": round(snap.t, 2), **cpu_use.between(prev, cur)})
        prev = cur
    out.write_text(json.dumps(series))
    serving = [s for s in series if any(s.get(r, 0) > 0.01 for r in SERVING)]
    total: Counter = Counter()
    for s in serving:
        total.update({k: v for k, v in s.items() if k not in ("t", "cpus", "span_s")})
    print(f"cores while serving ({len(serving)} s of {len(series)} s):")
    for role, v in sorted(total.items(), key=lambda kv: -kv[1]):
        print(f"  {role:<14}{v / max(1, len(serving)):.3f}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
