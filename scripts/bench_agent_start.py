#!/usr/bin/env python3
"""How long N traffic agents take to be listening: one process each (``ip netns exec
NS nice -n -10 python -m traffic.runtime.agent``, as the replay started them before) vs
forked from one pre-imported launcher (``traffic.runtime.launcher``, as it does now).

Each agent gets its own network namespace (``tbbench-<i>``, loopback only, made
and removed here) and an empty plan. Prints seconds to all-ready and the CPU
seconds the agents and their starters used, per N and method.

    sudo .venv/bin/python scripts/bench_agent_start.py [--n 32,64] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common.paths import module_env  # noqa: E402
from traffic.runtime.launcher import AgentSpec, Fleet  # noqa: E402

PREFIX = "tbbench-"
ENV = module_env()


def make_namespaces(n: int) -> list[str]:
    names = [f"{PREFIX}{i}" for i in range(n)]
    batch = "".join(f"netns add {x}\nnetns exec {x} ip link set lo up\n" for x in names)
    subprocess.run(["ip", "-batch", "-"], input=batch, text=True, check=True)
    return names


def remove_namespaces(names: list[str]) -> None:
    subprocess.run(["ip", "-force", "-batch", "-"], input="".join(f"netns delete {x}\n" for x in names),
                   text=True, capture_output=True)


def agent_args(name: str, d: Path) -> list[str]:
    plan = d / f"{name}.plan.jsonl"
    plan.write_text("")
    return ["--name", name, "--plan", str(plan), "--out", str(d), "--ready-file", str(d / f"{name}.ready"),
            "--listen", "127.0.0.1:7000"]


def wait_ready(d: Path, names: list[str], t0: float, timeout_s: float = 120) -> float:
    while not all((d / f"{n}.ready").exists() for n in names):
        if time.monotonic() - t0 > timeout_s:
            raise SystemExit(f"not all agents ready after {timeout_s} s")
        time.sleep(0.005)
    return time.monotonic() - t0


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def per_process(spaces: list[str], d: Path) -> tuple[float, float]:
    names = [f"a{i}" for i in range(len(spaces))]
    cpu0, t0 = children_cpu(), time.monotonic()
    procs = [subprocess.Popen(["ip", "netns", "exec", ns, "nice", "-n", "-10", sys.executable, "-m",
                               "traffic.runtime.agent",
                               *agent_args(n, d), "--t0", f"{time.monotonic() + 3600:.3f}"], cwd=REPO, env=ENV,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for ns, n in zip(spaces, names)]
    ready = wait_ready(d, names, t0)
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait()
    return ready, children_cpu() - cpu0


def launcher(spaces: list[str], d: Path) -> tuple[float, float]:
    names = [f"a{i}" for i in range(len(spaces))]
    specs = [AgentSpec(n, ns, [*agent_args(n, d), "--t0-stdin"], str(d / f"{n}.stderr"), -10)
             for ns, n in zip(spaces, names)]
    cpu0, t0 = children_cpu(), time.monotonic()
    fleet = Fleet(specs, d / "launcher.json", cwd=REPO, env=ENV)
    ready = wait_ready(d, names, t0)
    fleet.stop()
    return ready, children_cpu() - cpu0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", default="32,64")
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    if os.geteuid() != 0:
        print("bench_agent_start: run as root (it makes network namespaces)", file=sys.stderr)
        return 2
    print(f"{'agents':>6} {'method':<12} {'ready s (median of %d)' % args.reps:>22} {'min':>6} {'max':>6} "
          f"{'CPU s':>6}")
    for n in (int(x) for x in args.n.split(",")):
        spaces = make_namespaces(n)
        try:
            for method, fn in (("per-process", per_process), ("launcher", launcher)):
                got = []
                for _ in range(args.reps):
                    with tempfile.TemporaryDirectory() as tmp:
                        got.append(fn(spaces, Path(tmp)))
                ready = [g[0] for g in got]
                print(f"{n:>6} {method:<12} {statistics.median(ready):>22.2f} {min(ready):>6.2f} {max(ready):>6.2f} "
                      f"{statistics.median(g[1] for g in got):>6.2f}", flush=True)
        finally:
            remove_namespaces(spaces)
    return 0


if __name__ == "__main__":
    sys.exit(main())
