#!/usr/bin/env python3
"""What a run does before its serving engine starts, at each size: wall seconds and peak memory per stage.

For each n (one fresh process each, so its peak RSS is its own) the default experiment at the per-GPU load
``testbed scale`` runs (``testbed.experiment.scale.point_values``: 0.875 sessions a GPU, the generated workload
held per GPU), on the ideal backend, through the stages a ``testbed run`` goes through once per run and once
per repetition, both fabrics:

* ``resolve``: the experiment checked (every fabric built; what the backend builds from it checked);
* ``plan``: the run directory's plan/ (each fabric's plan JSON with its rule count, cost, picture);
* ``workload``: the requests served (a generated workload drawn);
* ``network`` / ``prepare`` / ``cluster`` / ``start``, per fabric: the fabric model, the serving cluster's
  config, the cluster (engines, hit tables, caches, pools), its warm start (every session in flight placed);
* ``routes``, per fabric: the pairs a repetition of the default layout talks over, routed on the model's tables
  (every pair inside each decode engine, one pair per prefill and decode engine; both NIC port pairs): the
  path look-ups a self-routing engine (the twin, the flow-level engine) makes.

    .venv/bin/python scripts/bench_setup.py [--n 512,2048,8192,16384]

Prints one line per stage: seconds, and the process's peak RSS after it (docs/fabrics.md, "At scale").
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _rss_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def stages(n: int) -> list[tuple[str, float, int]]:
    """(stage, seconds, peak RSS MB after it) of one size, in this process."""
    from fabrics import addressing
    from fabrics.routing import forwarding_tables, walk
    from testbed.experiment import rundir, scale
    from testbed.experiment.schema import Override, repetition_spec, resolve
    from testbed.repetition.drivers.live import prepare_live
    from testbed.repetition.spec import served_requests

    out = []

    def timed(name: str, fn):
        t = time.monotonic()
        value = fn()
        out.append((name, time.monotonic() - t, _rss_mb()))
        return value

    base = resolve(None, [Override("backend", "ideal", "bench")])
    values = scale.point_values(base, n)
    overrides = [Override("backend", "ideal", "bench"), Override("gpus_per_switch", "auto", "bench")]
    overrides += [Override(k, v, "bench") for k, v in values.items()]
    res = timed("resolve", lambda: resolve(None, overrides))
    exp = res.experiment
    with tempfile.TemporaryDirectory() as tmp:
        timed("plan", lambda: rundir.write_plan(exp, Path(tmp), lambda m: None))
    timed("workload", lambda: served_requests(repetition_spec(exp, exp.fabrics[0])))
    for kind in exp.fabrics:
        spec = repetition_spec(exp, kind)
        net = timed(f"{kind} network", lambda: res.backend.network(spec.fabric))
        setup = timed(f"{kind} prepare", lambda: prepare_live(spec, n, net.link.rate_bps))
        cluster = timed(f"{kind} cluster", lambda: setup.traffic.cluster())
        timed(f"{kind} start", lambda: cluster.start(0.0))

        def routes() -> int:
            fabric, tables = net.model, forwarding_tables(net.model)
            pairs = {(a, b) for e in setup.engines["decode"] for a in e for b in e if a != b}
            pairs |= {(p[0], d[0]) for p in setup.engines["prefill"] for d in setup.engines["decode"]}
            for a, b in pairs:
                for sp, dp in ((1, 2), (2, 1)):
                    walk(fabric, tables, (a, sp), (b, dp))
            return len(pairs)

        count = timed(f"{kind} routes", routes)
        out[-1] = (f"{kind} routes ({2 * count} connections)", *out[-1][1:])
    addressing.parse_ip.cache_clear()
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", default="512,2048,8192,16384", help="sizes, comma separated")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child process: one size, JSON out
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(stages(args.one)))
        return 0
    for n in (int(x) for x in args.n.split(",")):
        t = time.monotonic()
        proc = subprocess.run([sys.executable, __file__, "--one", str(n)], capture_output=True, text=True)
        if proc.returncode:
            print(f"n={n}: failed after {time.monotonic() - t:.0f} s: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        rows = json.loads(proc.stdout.strip().splitlines()[-1])
        total = sum(s for _, s, _ in rows)
        print(f"n={n}: {total:.1f} s of set-up, peak RSS {max(m for _, _, m in rows)} MB")
        for name, s, mb in rows:
            print(f"  {name:<36} {s:8.2f} s  {mb:6d} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
