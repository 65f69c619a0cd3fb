"""``testbed run``: every fabric x every repetition of one experiment, one
after the other, into one run directory.

One directory because the report compares fabrics on exactly the same
traffic: it needs all their repetitions, the resolved config and the versions side
by side. Layout (what ``testbed.report`` reads):

    reports/<YYYYmmdd-HHMMSS>-<name>/
      experiment.json    resolved config, its source file, the CLI overrides, the planned runs
      versions.json      project, git, OVS, os-ken, kernel, python
      plan/<fabric>.png, plan/<fabric>.json, plan/cost.json
      runs/<fabric>/rep<k>/   one repetition's run directory each (summary.json, ...) or error.txt
      headline.json      per fabric: headline numbers of every repetition and their spread
      report.html, summary.json   written by testbed.report.build_report

The repetition function is a parameter (default: ``testbed.repetition.orchestrate.run_repetition`` after a
root/OVS/no-fabric-up check) so the loop is tested without a fabric.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from testbed.errors import EnvironmentProblem, TestbedError
from testbed.experiment.schema import Resolved, datapath_config, fabric_args, pfc_settings, repetition_config
from testbed.paths import REPO

HEADLINE_KEYS = ("goodput_bps", "fct_p99_ms", "ttft_p99_ms", "ttft_p50_ms", "throughput_tokens_per_s", "pauses",
                 "drops", "kv_slowdown_p99")

Log = Callable[[str], None]


def stderr_log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------ planning
@dataclass(frozen=True)
class PlannedRepetition:
    """One repetition of the experiment: which fabric, which repetition, its seed and folder."""

    fabric: str
    rep: int
    seed: int

    @property
    def rel(self) -> Path:
        return Path("runs") / self.fabric / f"rep{self.rep}"

    def as_dict(self) -> dict:
        return {"fabric": self.fabric, "rep": self.rep, "seed": self.seed, "dir": str(self.rel)}


def targets(exp) -> list[PlannedRepetition]:
    """Repetition-major, so an interrupted run still has every fabric of the first repetitions."""
    return [PlannedRepetition(kind, rep, exp.seed + rep - 1) for rep in range(1, exp.repetitions + 1)
            for kind in exp.fabrics]


def replayed_s(exp) -> float:
    """Wall seconds one repetition runs: the trace slice sped up, or (live, closed loop) the cluster time
    stretched by the time dilation."""
    if exp.serving.driver == "live":
        cluster_s = exp.trace.duration_s if exp.serving.arrivals == "closed" else exp.trace.duration_s / exp.trace.speed
        return cluster_s * exp.link.time_dilation
    return exp.trace.duration_s / exp.trace.speed


def _backend_estimate(exp) -> tuple[float, str] | None:
    """The backend's own model of a repetition's wall time (the ns-3 twin's), None without one."""
    from testbed import backends

    return backends.get(exp.backend).estimate(exp)


def _per_repetition(exp) -> tuple[float, float]:
    """(wall seconds of the run itself, set-up seconds) of one repetition on the experiment's backend."""
    from testbed import backends

    b = backends.get(exp.backend)
    own = b.estimate(exp)
    if own is not None:
        return 0.0, own[0]
    return (replayed_s(exp) if b.realtime else 0.0), b.setup_s


def _once_s(exp) -> float:
    from testbed import backends

    return backends.get(exp.backend).once_s


def estimate_s(exp) -> float:
    """fabrics x repetitions x (replayed wall time + set-up overhead), or the backend's own model of a
    repetition; plus what the backend spends once per process."""
    return _once_s(exp) + len(exp.fabrics) * exp.repetitions * sum(_per_repetition(exp))


def estimate_text(exp) -> str:
    run_s, setup_s = _per_repetition(exp)
    own = _backend_estimate(exp)
    if own is not None:
        each = f"~{minutes(own[0])}: {own[1]}"
    else:
        each = f"{replayed_s(exp):g} s replayed + ~{setup_s:g} s set-up" if run_s else f"~{setup_s:g} s of computing"
    once = f" + ~{_once_s(exp):g} s once" if _once_s(exp) else ""
    return (f"{len(exp.fabrics)} fabric(s) x {exp.repetitions} repetition(s) x ({each}){once} = "
            f"~{minutes(estimate_s(exp))}")


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


def slice_requests(exp) -> int:
    """Requests in the trace slice; an empty slice fails here, before any directory or fabric exists."""
    from traffic.model import traces

    t = exp.trace
    read = traces.read_trace(t.path, t.format, skip_bad=t.skip_bad)
    if exp.serving.driver == "live" and exp.serving.arrivals == "closed":  # sizes only, from the slice's start
        reqs = [r for r in read.requests if r.arrival_s >= t.start_s]
        if not reqs:
            raise TestbedError(f"trace: no request of {t.path} arrives after {t.start_s:g} s")
        return len(reqs)
    reqs = traces.slice_requests(read.requests, start_s=t.start_s, end_s=t.start_s + t.duration_s,
                                 first_n=t.first_n, speed=t.speed)
    if not reqs:
        raise TestbedError(f"trace: the window {t.start_s:g} .. {t.start_s + t.duration_s:g} s of {t.path} "
                           "holds no request")
    return len(reqs)


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


# ------------------------------------------------------- run directory
def _write_json(path: Path, doc) -> None:
    path.write_text(json.dumps(doc, indent=1) + "\n")


def write_plan(exp, run_dir: Path, log: Log) -> None:
    """plan/<fabric>.png (picture), plan/<fabric>.json (plan_json) and plan/cost.json."""
    from testbed.fabric import build_fabric, describe
    from testbed.fabric.cost import cost_of, ratios

    out = run_dir / "plan"
    out.mkdir(exist_ok=True)
    costs = {}
    for kind in exp.fabrics:
        f = build_fabric(**fabric_args(exp, kind))
        costs[kind] = cost_of(f)
        _write_json(out / f"{kind}.json", describe.plan_json(f))
        try:
            from testbed.fabric.draw import draw

            draw(f, out / f"{kind}.png")
        except Exception as exc:  # a missing picture must not cost the experiment
            log(f"WARNING: plan/{kind}.png not drawn: {exc}")
    doc = {"fabrics": {k: c.as_dict() for k, c in costs.items()}}
    if "zcube" in costs and "roft" in costs:
        doc["ratios_zcube_over_roft"] = ratios(costs["zcube"], costs["roft"])
    _write_json(out / "cost.json", doc)


def start_run_dir(resolved: Resolved, run_dir: Path, versions: dict, log: Log, extra: dict | None = None) -> None:
    """experiment.json, versions.json and plan/ before the first repetition starts."""
    exp = resolved.experiment
    doc = resolved.as_dict() | {"runs": [t.as_dict() for t in targets(exp)], "estimate_s": round(estimate_s(exp)),
                                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": sys.argv[1:]}
    _write_json(run_dir / "experiment.json", doc | (extra or {}))
    _write_json(run_dir / "versions.json", versions)
    if exp.calibration:  # the report shows the evidence the load was chosen from
        shutil.copyfile(exp.calibration, run_dir / "calibration.json")
    if exp.load_curve:  # the report shows the sweep's curve and marks this run's level on it
        shutil.copyfile(exp.load_curve, run_dir / "load_curve.json")
    if exp.sensitivity_result:  # the report shows the last sensitivity shipped for this experiment
        shutil.copyfile(exp.sensitivity_result, run_dir / "sensitivity.json")
    write_plan(exp, run_dir, log)


def _write_error(target: Path, text: str) -> None:
    target.mkdir(parents=True, exist_ok=True)
    (target / "error.txt").write_text(text)


def _repetition_once(repetition_fn: Callable, exp, t, dp, pfc, target: Path, log: Log) -> None:
    repetition_fn(fabric_args(exp, t.fabric), dp, repetition_config(exp, t.rep, t.fabric), out_root=None, log=log,
              run_dir=target, pfc=pfc)


def execute(resolved: Resolved, run_dir: Path, repetition_fn: Callable, log: Log) -> list[dict]:
    """Every target in turn. A repetition that failed for an environment reason (the machine, not the
    experiment: EnvironmentProblem) is retried once, its first attempt kept beside it as
    ``rep<k>.attempt1/`` and named in ``retried.txt``. A failing repetition leaves error.txt in its
    folder and the loop goes on; Ctrl-C leaves a note there too and stops."""
    exp = resolved.experiment
    dp = datapath_config(exp)
    pfc = pfc_settings(exp)
    plan = targets(exp)
    outcomes = []
    for i, t in enumerate(plan, 1):
        target = run_dir / t.rel
        target.parent.mkdir(parents=True, exist_ok=True)
        log(f"[{i}/{len(plan)}] {t.fabric}, repetition {t.rep} (seed {t.seed}) -> {target}")
        t0 = time.monotonic()
        retried = None
        try:
            try:
                _repetition_once(repetition_fn, exp, t, dp, pfc, target, log)
            except EnvironmentProblem as exc:
                retried = f"{type(exc).__name__}: {exc}"
                aside = target.with_name(f"{target.name}.attempt1")
                if target.exists():
                    target.rename(aside)
                _write_error(aside, retried + "\n")
                log(f"{t.fabric} repetition {t.rep} failed for an environment reason ({exc}); retrying once")
                _repetition_once(repetition_fn, exp, t, dp, pfc, target, log)
                (target / "retried.txt").write_text(f"first attempt failed ({aside.name}/): {retried}\n")
        except KeyboardInterrupt:
            _write_error(target, "interrupted (Ctrl-C): this repetition did not finish\n")
            raise
        except Exception as exc:
            _write_error(target, f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}")
            log(f"{t.fabric} repetition {t.rep} FAILED: {exc} ({t.rel / 'error.txt'}); going on")
            outcomes.append(t.as_dict() | {"status": "error", "error": f"{type(exc).__name__}: {exc}",
                                           "retried": retried})
            continue
        outcomes.append(t.as_dict() | {"status": "ok", "wall_s": round(time.monotonic() - t0, 1),
                                       "retried": retried})
    return outcomes


# ------------------------------------------------------------- results
def _pauses(s: dict):
    """PFC pauses, under whichever key the PFC datapath's summary uses (None before it exists)."""
    for key in ("pfc_pauses", "pauses"):
        v = s.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return v
        if isinstance(v, dict):
            return v.get("total")
    pfc = s.get("pfc")
    return pfc.get("pauses") if isinstance(pfc, dict) else None


def headline(run_dir: Path) -> dict:
    """The headline numbers of one repetition's directory, from its summary.json ({} if it has none)."""
    try:
        s = json.loads((Path(run_dir) / "summary.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return {"goodput_bps": s.get("goodput_bps"), "goodput_real_equivalent_bps": s.get("goodput_real_equivalent_bps"),
            "fct_p99_ms": (s.get("fct_ms") or {}).get("p99"), "ttft_p99_ms": (s.get("ttft_ms") or {}).get("p99"),
            "ttft_p50_ms": (s.get("ttft_ms") or {}).get("p50"),
            "kv_slowdown_p99": (s.get("slowdown") or {}).get("p99"),
            "throughput_tokens_per_s": s.get("throughput_tokens_per_s"),
            "pauses": _pauses(s), "drops": s.get("queue_drops"), "transfers": s.get("transfers"),
            "verified": s.get("verified"), "in_flight": s.get("in_flight")}


def missing_fails(head: dict) -> bool:
    """A repetition whose transfers were not all verified fails the run, unless its in-flight verdict
    (``testbed.repetition.in_flight``, summary.json "in_flight") says only messages in flight are missing and
    its figures over the measured window stand."""
    if head.get("verified") == head.get("transfers"):
        return False
    v = head.get("in_flight")
    return not isinstance(v, dict) or bool(v.get("fails", True))


def spread(values: list) -> dict | None:
    """mean, min, max and sample stdev of the numbers among ``values`` (None: no number)."""
    nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not nums:
        return None
    return {"mean": round(statistics.fmean(nums), 6), "min": min(nums), "max": max(nums),
            "stdev": round(statistics.stdev(nums), 6) if len(nums) > 1 else 0.0, "n": len(nums)}


def fabric_headlines(exp, run_dir: Path) -> dict:
    """Per fabric: every repetition's headline (or error) and the spread of each headline number."""
    out = {}
    for kind in exp.fabrics:
        reps = []
        for t in (t for t in targets(exp) if t.fabric == kind):
            d = run_dir / t.rel
            err = d / "error.txt"
            reps.append(t.as_dict() | headline(d) | {
                "error": err.read_text().splitlines()[0] if err.is_file() else None})
        ok = [r for r in reps if r.get("goodput_bps") is not None]
        out[kind] = {"runs": len(reps), "ok": len(ok),
                     "unverified": sum(1 for r in ok if missing_fails(r)),
                     "in_flight": sum(1 for r in ok
                                      if r.get("verified") != r.get("transfers") and not missing_fails(r)),
                     **{k: spread([r.get(k) for r in ok]) for k in HEADLINE_KEYS + ("goodput_real_equivalent_bps",)},
                     "repetitions": reps}
    return out


def _fmt(stats: dict | None, scale: float = 1.0, digits: int = 2) -> str:
    if stats is None:
        return "-"
    text = f"{stats['mean'] / scale:.{digits}f}"
    if stats["n"] > 1:
        text += f" ({stats['min'] / scale:.{digits}f}..{stats['max'] / scale:.{digits}f})"
    return text


def headline_table(heads: dict) -> list[str]:
    """A few lines for the terminal: mean over repetitions, (min..max) when there are several."""
    rows = [("fabric", "runs ok", "goodput Mbit/s", "FCT p99 ms", "TTFT p99 ms", "pauses", "drops")]
    for kind, h in heads.items():
        rows.append((kind, f"{h['ok']}/{h['runs']}", _fmt(h["goodput_bps"], 1e6, 3), _fmt(h["fct_p99_ms"], digits=1),
                     _fmt(h["ttft_p99_ms"], digits=1), _fmt(h["pauses"], digits=0), _fmt(h["drops"], digits=0)))
    return columns(rows)


def columns(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows of cells as left-aligned text columns two spaces apart (the terminal tables of run, sweep
    and calibrate)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def report_builder() -> Callable:
    """testbed.report.build_report, imported only now (the report is optional for a run)."""
    from testbed.report import build_report as build

    return build


def build_report(run_dir: Path, log: Log) -> bool | None:
    """testbed.report.build_report(run_dir): True done, False failed (report-error.txt), None not available."""
    try:
        build = report_builder()
    except ImportError as exc:
        log(f"WARNING: no report.html: testbed.report is not available ({exc})")
        return None
    try:
        build(run_dir)
        return True
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        (run_dir / "report-error.txt").write_text(f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}")
        log(f"WARNING: the report failed: {exc} (report-error.txt); the repetitions' results are kept")
        return False


def finish(resolved: Resolved, run_dir: Path, outcomes: list[dict], log: Log) -> tuple[int, dict]:
    """headline.json, the report; exit status 1 if a repetition failed, lost transfers or the report failed."""
    exp = resolved.experiment
    heads = fabric_headlines(exp, run_dir)
    _write_json(run_dir / "headline.json", {"fabrics": heads, "outcomes": outcomes})
    report = build_report(run_dir, log)
    failed = [o for o in outcomes if o["status"] != "ok"]
    unverified = sum(h["unverified"] for h in heads.values())
    if failed:
        log(f"{len(failed)} of {len(outcomes)} repetitions failed: "
            + "; ".join(f"{o['dir']}: {o['error']}" for o in failed))
    for kind, h in heads.items():
        for r in h["repetitions"]:
            note = (r.get("in_flight") or {}).get("note")
            if note:
                log(f"{kind} rep{r['rep']}: {note}")
    if unverified:
        log(f"{unverified} repetition(s) did not verify every transfer and their figures do not all stand "
            "(see their summary.json, \"in_flight\")")
    return (1 if failed or unverified or report is False else 0), heads


# ----------------------------------------------------------------- entry
def real_repetition(backend: str) -> Callable:
    """testbed.repetition.orchestrate.run_repetition, once the backend confirmed it can carry the experiment now
    (the emulated fabric: root, Open vSwitch and no running fabric, since each fabric must be built with the
    experiment's own link settings, which a fabric already up would not have)."""
    from testbed import backends
    from testbed.repetition.orchestrate import run_repetition

    backends.get(backend).check(build_own=True)
    return run_repetition


def run_into(resolved: Resolved, run_dir: Path, repetition_fn: Callable, log: Log, versions: dict,
             extra: dict | None = None) -> tuple[int, dict]:
    """Fill an existing, empty run directory: set-up files, every repetition, headline, report."""
    mark_state(run_dir, "running")
    try:
        start_run_dir(resolved, run_dir, versions, log, extra)
        outcomes = execute(resolved, run_dir, repetition_fn, log)
        result = finish(resolved, run_dir, outcomes, log)
    except KeyboardInterrupt:
        mark_state(run_dir, "interrupted", "Ctrl-C or SIGTERM: the run stopped before it finished")
        raise
    except BaseException as exc:
        mark_state(run_dir, "failed", f"{type(exc).__name__}: {exc}")
        raise
    mark_state(run_dir, "finished")
    return result


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


def run_experiment(resolved: Resolved, out_root: Path, repetition_fn: Callable | None = None, log: Log = stderr_log,
                   out: Log = print) -> int:
    """The ``run`` verb: check, estimate, run everything, print the headline table and the run directory last."""
    exp = resolved.experiment
    n = slice_requests(exp)
    log(f"experiment {exp.name}: {', '.join(exp.fabrics)} with {exp.gpus} GPUs, {n} requests of "
        f"{Path(exp.trace.path).name}, {exp.serving.model} TP {exp.serving.prefill_tp}->{exp.serving.decode_tp}, "
        f"{exp.link.rate / 1e6:g} Mbit/s links, PFC {'on' if exp.pfc.enabled else 'off'}")
    log(f"estimated wall time: {estimate_text(exp)}")
    repetition_fn = repetition_fn or real_repetition(exp.backend)
    run_dir = new_run_dir(Path(out_root), exp.name)
    log(f"run directory {run_dir}")
    status, heads = run_into(resolved, run_dir, repetition_fn, log, collect_versions())
    for line in headline_table(heads):
        out(line)
    out(str(run_dir))
    return status
