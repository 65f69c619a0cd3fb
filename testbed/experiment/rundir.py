"""A run directory's life: its name, what is written before the first repetition (experiment.json,
versions.json, plan/), and its state (lifecycle.json: running, finished, failed, interrupted; ``clean``
marks a killed run's). What produced the results (versions) is recorded here too.

    reports/<YYYYmmdd-HHMMSS>-<name>/
      experiment.json    resolved config, its source file, the CLI overrides, the planned runs
      versions.json      project, git, OVS, os-ken, kernel, python
      lifecycle.json     running (with the pid), finished, failed or interrupted
      plan/<fabric>.png, plan/<fabric>.json, plan/cost.json
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from common.errors import TestbedError
from common.paths import REPO
from testbed.experiment.schema import Resolved, fabric_spec
from testbed.report import workload

Log = Callable[[str], None]


def new_run_dir(out_root: Path, name: str, now: float | None = None) -> Path:
    """reports/<YYYYmmdd-HHMMSS>-<name>/ (a -2, -3 ... suffix if two start in the same second)."""
    base = f"{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}-{name}"
    for i in range(1, 1000):
        path = out_root / (base if i == 1 else f"{base}-{i}")
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            continue
    raise TestbedError(f"{out_root}: could not make a new run directory for {base}")


# ------------------------------------------------------------- versions
def _command_output(argv: list[str], cwd: Path | None = None) -> str | None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=10, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _dist_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def collect_versions(run_cmd: Callable = _command_output) -> dict:
    """What produced the results: project, git commit (-dirty), OVS, os-ken, kernel, python."""
    git = run_cmd(["git", "rev-parse", "--short", "HEAD"], cwd=REPO)
    if git:
        dirty = run_cmd(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO)
        git = git.strip() + ("-dirty" if dirty and dirty.strip() else "")
    ovs = run_cmd(["ovs-vsctl", "--version"])
    return {"project": _dist_version("zcube-testbed"), "git": git or None,
            "ovs": ovs.splitlines()[0].strip() if ovs and ovs.strip() else None,
            "os_ken": _dist_version("os-ken"), "kernel": platform.release(), "python": platform.python_version()}


# ---------------------------------------------------- before the first repetition
def _write_json(path: Path, doc) -> None:
    path.write_text(json.dumps(doc, indent=1) + "\n")


def write_plan(exp, run_dir: Path, log: Log) -> None:
    """plan/<fabric>.png (picture), plan/<fabric>.json (plan_json) and plan/cost.json."""
    from fabrics import build_fabric, describe
    from fabrics.cost import cost_of, ratios
    from fabrics.draw import PLAN_DRAWN_GPUS, draw

    out = run_dir / "plan"
    out.mkdir(exist_ok=True)
    costs = {}
    for kind in exp.fabrics:
        f = build_fabric(**fabric_spec(exp, kind).args)
        costs[kind] = cost_of(f)
        _write_json(out / f"{kind}.json", describe.plan_json(f))
        if f.n_gpus > PLAN_DRAWN_GPUS:
            log(f"plan/{kind}.png: not drawn ({f.n_gpus} GPUs, more than {PLAN_DRAWN_GPUS}: a picture of every cable "
                "shows little at this size; `testbed fabric draw` draws it on request)")
            continue
        try:
            draw(f, out / f"{kind}.png")
        except Exception as exc:  # a missing picture must not cost the experiment
            log(f"WARNING: plan/{kind}.png not drawn: {exc}")
    doc = {"fabrics": {k: c.as_dict() for k, c in costs.items()}}
    if "zcube" in costs and "roft" in costs:
        doc["ratios_zcube_over_roft"] = ratios(costs["zcube"], costs["roft"])
    _write_json(out / "cost.json", doc)


def start_run_dir(resolved: Resolved, run_dir: Path, versions: dict, log: Log, runs: list[dict], estimate_s: float,
                  extra: dict | None = None) -> None:
    """experiment.json (the resolved experiment: every setting the run uses, its planned ``runs`` and the
    estimate), versions.json and plan/ before the first repetition starts."""
    exp = resolved.experiment
    doc = resolved.as_dict() | {"runs": runs, "estimate_s": round(estimate_s),
                                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": sys.argv[1:]}
    _write_json(run_dir / "experiment.json", doc | (extra or {}))
    _write_json(run_dir / "versions.json", versions)
    if exp.calibration:  # the report shows the evidence the load was chosen from
        shutil.copyfile(exp.calibration, run_dir / "calibration.json")
    if exp.load_curve:  # the report shows the sweep's curve and marks this run's level on it
        shutil.copyfile(exp.load_curve, run_dir / "load_curve.json")
    if exp.scale_result:  # the headline shows the shipped run at the seed's scale beside this one
        shutil.copyfile(exp.scale_result, run_dir / "scale_result.json")
    if exp.crosscheck_result:  # the headline says whether the two engines agreed on this experiment
        changed = changed_workload_keys(resolved)
        if changed:  # the shipped check is of the experiment as written, not of this variant of it
            log(f"the shipped cross-check ({Path(exp.crosscheck_result).name}) is of the experiment as written; "
                f"this run sets {', '.join(changed)}: its line is left out")
        else:
            doc = json.loads(Path(exp.crosscheck_result).read_text()) | {"shipped": Path(exp.crosscheck_result).name}
            _write_json(run_dir / "crosscheck.json", doc)
    if exp.sensitivity_result:  # the report shows the last sensitivity shipped for this experiment
        shutil.copyfile(exp.sensitivity_result, run_dir / "sensitivity.json")
    write_plan(exp, run_dir, log)


def changed_workload_keys(resolved: Resolved) -> list[str]:
    """The overridden key paths that change what is served or carried (``testbed.report.workload``): a shipped
    result of the experiment as written does not speak for such a run."""
    return sorted({o.key for o in resolved.overrides if workload.is_workload_key(o.key)})


# ------------------------------------------------------------- lifecycle
LIFECYCLE_FILE = "lifecycle.json"  # a run directory's state (not the fabric's state.json)
OLD_LIFECYCLE_FILE = "state.json"  # its name in run directories written before issue 23


def mark_state(run_dir: Path, state: str, why: str | None = None) -> None:
    """``lifecycle.json``: running (with our pid), finished, failed or interrupted. A run killed outright
    leaves "running" with a dead pid, which ``testbed clean`` turns into "interrupted"."""
    doc = {"state": state, "pid": os.getpid(), "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if why:
        doc["why"] = why
    _write_state(run_dir / LIFECYCLE_FILE, doc)


def _write_state(path: Path, doc: dict) -> None:
    """Atomically, so clean or a reader never sees half a state file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc) + "\n")
    tmp.replace(path)


def mark_killed_runs(out_root: Path) -> list[Path]:
    """Run directories under ``out_root`` (and their sweep points) still "running" whose process is gone:
    marked "interrupted" so no killed run passes for one in progress."""
    marked = []
    paths = [p for name in (LIFECYCLE_FILE, OLD_LIFECYCLE_FILE) for p in Path(out_root).glob(f"**/{name}")]
    for path in sorted(paths):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        pid = doc.get("pid")
        if doc.get("state") == "running" and isinstance(pid, int) and not Path(f"/proc/{pid}").exists():
            _write_state(path, doc | {"state": "interrupted", "why": f"killed: its process {pid} is gone"})
            marked.append(path.parent)
    return marked
