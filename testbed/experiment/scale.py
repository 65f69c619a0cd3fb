"""``testbed scale``: the experiment's per-GPU load at growing n on ZCube and ROFT, repeated: ZCube/ROFT output
tokens/s and TTFT P99 against n with their intervals, and the switches and optics each size needs.

Each size n is a point of a paired sweep (``testbed.experiment.sweep``) whose keys grow together:

* ``gpus`` = n with ``gpus_per_switch: auto`` (``fabrics.zcube.scaled_k``): ZCube's k for n, ROFT a two-tier
  fat-tree of switches of the same radix; n = 16,384 is the blog's one layer of 51.2T switches (k = 128);
* ``serving.concurrency`` = the experiment's sessions per GPU x n: the default's 28 at n = 32 is 0.875 a GPU,
  the level its calibration found at n = 512 (experiments/default.yaml), so 14,336 at n = 16,384;
* ``trace.first_n`` (a generated workload only) = the calibration's workload per GPU x n, never fewer than the
  experiment's own: n = 512 drew ``GENERATED_REQUESTS`` (10,000: ~900 sessions for 448 in flight, so the closed
  loop never came round to sessions whose blocks are already cached); held per GPU, n = 16,384 draws 320,000.

Everything else is the experiment's (its duration, repetitions, links, layout). Every size is resolved, its
fabrics built and checked, before anything runs: a size the wiring cannot make (not a multiple of its k or of
a server, a ROFT needing more leaves than a spine has ports) is one line. Layout, the sweep's:

    reports/<YYYYmmdd-HHMMSS>-scale-<name>/
      sweep.json, sweep.csv        the points and each fabric's headline figures
      points/<gpus=n,...>/         a complete run directory each (testbed.experiment.run)
      scale.json, scale.png, scale.html   testbed.report.scale_section: the curve, its intervals, the cost
"""

from __future__ import annotations

import math
from pathlib import Path

from common.errors import TestbedError
from testbed.experiment import run, sweep
from testbed.experiment.schema import Override, Resolved, resolve
from traffic.model.workloads import GENERATED_REQUESTS

SIZES = (32, 128, 512, 2048, 8192, 16384)
BACKEND = "fluid"  # the backend when none is asked for: the flow-level engine (docs/fluid.md), up to 16,384
CALIBRATION_GPUS = 512  # where the default's load per GPU and its workload's size were set (calibration.json)
KEYS = ("gpus", "serving.concurrency", "trace.first_n")


def parse_sizes(text: str) -> list[int]:
    """'32,128,512' -> [32, 128, 512]: distinct whole numbers >= 2, in the order given."""
    sizes = []
    for item in (x.strip() for x in str(text).split(",")):
        if not item.isdigit() or int(item) < 2:
            raise TestbedError(f"--sizes {text!r}: {item!r} is not a number of GPUs: expected whole numbers >= 2 "
                               "separated by commas, e.g. 32,128,512")
        if int(item) in sizes:
            raise TestbedError(f"--sizes {text!r}: {item} is listed twice")
        sizes.append(int(item))
    return sizes


def with_backend(overrides: list[Override]) -> list[Override]:
    """The overrides, with ``BACKEND`` first unless they name a backend."""
    if any(o.key == "backend" for o in overrides):
        return list(overrides)
    return [Override("backend", BACKEND, "testbed scale")] + list(overrides)


def point_values(base: Resolved, n: int) -> dict[str, int]:
    """The keys a size sets (module docstring): gpus, the sessions in flight, the generated workload's size."""
    exp = base.experiment
    per_gpu = exp.serving.concurrency / exp.gpus
    values = {"gpus": n, "serving.concurrency": max(1, round(per_gpu * n))}
    if exp.trace.generated:
        own = exp.trace.first_n or GENERATED_REQUESTS
        values["trace.first_n"] = max(own, math.ceil(GENERATED_REQUESTS * n / CALIBRATION_GPUS))
    return values


def plan(path: str | Path | None, overrides: list[Override], sizes: list[int]):
    """(the experiment as given, the sweep's params, its points resolved): every size checked, nothing run."""
    if not sizes:
        raise TestbedError("--sizes: expected at least one number of GPUs")
    overrides = with_backend(overrides)
    base = resolve(path, overrides)
    exp = base.experiment
    if not (exp.serving.driver == "live" and exp.serving.arrivals == "closed"):
        raise TestbedError(f"{exp.name}: testbed scale holds the sessions in flight per GPU: expected a closed loop "
                           f"(serving.driver live, serving.arrivals closed), got {exp.serving.driver} with "
                           f"{exp.serving.arrivals} arrivals")
    if sorted(exp.fabrics) != ["roft", "zcube"]:
        raise TestbedError(f"{exp.name}: testbed scale compares ZCube and ROFT: expected fabrics zcube and roft, got "
                           f"{', '.join(exp.fabrics)}")
    values = [point_values(base, n) for n in sizes]
    params = [(key, [str(v[key]) for v in values]) for key in KEYS if key in values[0]]
    overrides = [Override("gpus_per_switch", "auto", "testbed scale")] + overrides
    return base, overrides, params, sweep.resolve_points(path, overrides, params, paired=True)


def run_scale(path: str | Path | None, planned: tuple, out_root: Path, log: run.Log = run.stderr_log,
              out: run.Log = print, progress: run.Progress | None = None) -> tuple[int, Path, dict]:
    """The ``scale`` verb on ``plan``'s result: estimate, run every size in turn (``progress``: told each
    repetition as it ends), write the Scale page; (worst exit status, scale directory, scale document)."""
    from testbed.report import scale_section

    base, overrides, params, points = planned
    exp = base.experiment
    sizes = [int(dict(p)["gpus"]) for p, _ in points]
    log(f"scale curve of {exp.name} on the {points[0][1].experiment.backend} backend: n = "
        f"{', '.join(str(n) for n in sizes)}, {exp.serving.concurrency / exp.gpus:g} sessions in flight a GPU, "
        f"{exp.repetitions} repetitions a fabric and size")
    status, scale_dir = sweep.run_sweep(path, overrides, params, out_root, log=log, out=lambda line: None,
                                        name=f"scale-{exp.name}", paired=True, points=points, progress=progress)
    doc = scale_section.doc(scale_dir)
    for line in table(doc):
        out(line)
    out(str(scale_dir / "scale.html"))
    return status, scale_dir, doc


def table(doc: dict) -> list[str]:
    """The terminal's table: per size the two ratios with their intervals, the cost ratios, the wall time."""
    def ratio(r: dict | None) -> str:
        if not r or r.get("ratio") is None:
            return "-"
        ci = r.get("ci95")
        return f"{r['ratio']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else " (1 pair)")

    rows = [("n", "in flight", "tokens/s Z/R [95 %]", "TTFT P99 Z/R [95 %]", "switches Z/R", "optics Z/R",
             "capex Z/R", "wall s")]
    for p in doc["points"]:
        cost = (p.get("cost") or {}).get("ratios") or {}
        rows.append((str(p["n"]), str(p["values"].get("serving.concurrency", "-")),
                     ratio(p["intervals"].get("throughput_tokens_per_s")), ratio(p["intervals"].get("ttft_p99_ms")),
                     *(f"{cost[k]:.2f}" if cost.get(k) is not None else "-"
                       for k in ("switches", "transceivers", "capex_units")),
                     f"{p['wall_s']:.0f}" if p.get("wall_s") is not None else "-"))
    return run.columns(rows)


__all__ = ["run_scale", "plan", "parse_sizes", "point_values", "table", "SIZES", "BACKEND"]
