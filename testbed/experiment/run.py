"""``testbed run``: every fabric x every repetition of one experiment, one after the other, into one
run directory.

One directory because the report compares fabrics on exactly the same traffic: it needs all their
repetitions, the resolved config and the versions side by side (``testbed.experiment.rundir``: its files
before the first repetition and its lifecycle). Besides those, ``run`` writes:

      runs/<fabric>/rep<k>/   one repetition's run directory each (summary.json, ...) or error.txt
      headline.json      per fabric: headline numbers of every repetition and their spread
      report.html, summary.json   written by testbed.report.build_report

The backend is resolved once (``Resolved.backend``) and passed down as an object; each repetition gets its
``RepetitionSpec`` (``testbed.experiment.schema.repetition_spec``) and runs with
``testbed.repetition.orchestrate.run_repetition``.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from common.errors import EnvironmentProblem
from testbed.backends.base import Backend
from testbed.experiment import rundir
from testbed.experiment.schema import Resolved, repetition_spec
from testbed.repetition.orchestrate import run_repetition
from testbed.repetition.spec import served_requests

HEADLINE_KEYS = ("goodput_bps", "fct_p99_ms", "ttft_p99_ms", "ttft_p50_ms", "throughput_tokens_per_s", "pauses",
                 "drops", "kv_slowdown_p99")

Log = Callable[[str], None]


def stderr_log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ----------------------------------------------------------------- entry
def run_experiment(resolved: Resolved, out_root: Path, log: Log = stderr_log, out: Log = print,
                   backend: Backend | None = None) -> int:
    """The ``run`` verb: check, estimate, run everything, print the headline table and the run directory last.
    ``backend``: the experiment's own (``resolved.backend``) unless given."""
    exp = resolved.experiment
    backend = backend or resolved.backend
    n = requests_served(exp)
    log(f"experiment {exp.name}: {', '.join(exp.fabrics)} with {exp.gpus} GPUs, {n} requests of "
        f"{Path(exp.trace.path).name}, {exp.serving.model} TP {exp.serving.prefill_tp}->{exp.serving.decode_tp}, "
        f"{exp.link.rate / 1e6:g} Mbit/s links, PFC {'on' if exp.pfc.enabled else 'off'}")
    log(f"estimated wall time: {estimate_text(exp, backend)}")
    backend.check(build_own=True)  # each fabric is built with the experiment's own link settings
    run_dir = rundir.new_run_dir(Path(out_root), exp.name)
    log(f"run directory {run_dir}")
    status, heads = run_into(resolved, run_dir, backend, log, rundir.collect_versions())
    for line in headline_table(heads):
        out(line)
    out(str(run_dir))
    return status


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
    """Wall seconds one repetition's traffic runs (``RepetitionSpec.wall_s``: the trace slice sped up, or the
    cluster time stretched by the time dilation)."""
    return repetition_spec(exp, exp.fabrics[0]).wall_s


def _per_repetition(exp, backend: Backend) -> tuple[float, float]:
    """(wall seconds of the run itself, set-up seconds) of one repetition on ``backend``."""
    return (replayed_s(exp) if backend.realtime else 0.0), backend.setup_s


def estimate_s(exp, backend: Backend) -> float:
    """fabrics x repetitions x (replayed wall time + set-up overhead)."""
    return len(exp.fabrics) * exp.repetitions * sum(_per_repetition(exp, backend))


def estimate_text(exp, backend: Backend) -> str:
    run_s, setup_s = _per_repetition(exp, backend)
    each = f"{replayed_s(exp):g} s replayed + ~{setup_s:g} s set-up" if run_s else f"~{setup_s:g} s of computing"
    return (f"{len(exp.fabrics)} fabric(s) x {exp.repetitions} repetition(s) x ({each}) = "
            f"~{minutes(estimate_s(exp, backend))}")


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


def requests_served(exp) -> int:
    """Requests the run serves (``traffic.model.traces.served_requests``, the drivers' own rule); an empty
    slice fails here, before any directory or fabric exists."""
    return len(served_requests(repetition_spec(exp, exp.fabrics[0]))[0])


def _write_error(target: Path, text: str) -> None:
    target.mkdir(parents=True, exist_ok=True)
    (target / "error.txt").write_text(text)


def _repetition_once(exp, t: "PlannedRepetition", backend: Backend, target: Path, log: Log) -> None:
    run_repetition(repetition_spec(exp, t.fabric, t.rep), backend, log=log, run_dir=target)


def execute(resolved: Resolved, run_dir: Path, backend: Backend, log: Log) -> list[dict]:
    """Every target in turn. A repetition that failed for an environment reason (the machine, not the
    experiment: EnvironmentProblem) is retried once, its first attempt kept beside it as
    ``rep<k>.attempt1/`` and named in ``retried.txt``. A failing repetition leaves error.txt in its
    folder and the loop goes on; Ctrl-C leaves a note there too and stops."""
    exp = resolved.experiment
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
                _repetition_once(exp, t, backend, target, log)
            except EnvironmentProblem as exc:
                retried = f"{type(exc).__name__}: {exc}"
                aside = target.with_name(f"{target.name}.attempt1")
                if target.exists():
                    target.rename(aside)
                _write_error(aside, retried + "\n")
                log(f"{t.fabric} repetition {t.rep} failed for an environment reason ({exc}); retrying once")
                _repetition_once(exp, t, backend, target, log)
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
            "verified": s.get("verified")}


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
                     "unverified": sum(1 for r in ok if r.get("verified") != r.get("transfers")),
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
    (run_dir / "headline.json").write_text(json.dumps({"fabrics": heads, "outcomes": outcomes}, indent=1) + "\n")
    report = build_report(run_dir, log)
    failed = [o for o in outcomes if o["status"] != "ok"]
    unverified = sum(h["unverified"] for h in heads.values())
    if failed:
        log(f"{len(failed)} of {len(outcomes)} repetitions failed: "
            + "; ".join(f"{o['dir']}: {o['error']}" for o in failed))
    if unverified:
        log(f"{unverified} repetition(s) did not verify every transfer (see their summary.json)")
    return (1 if failed or unverified or report is False else 0), heads


# ----------------------------------------------------------------- one run directory
def run_into(resolved: Resolved, run_dir: Path, backend: Backend, log: Log, versions: dict,
             extra: dict | None = None) -> tuple[int, dict]:
    """Fill an existing, empty run directory: set-up files, every repetition, headline, report."""
    exp = resolved.experiment
    rundir.mark_state(run_dir, "running")
    try:
        rundir.start_run_dir(resolved, run_dir, versions, log, [t.as_dict() for t in targets(exp)],
                             estimate_s(exp, backend), extra)
        outcomes = execute(resolved, run_dir, backend, log)
        result = finish(resolved, run_dir, outcomes, log)
    except KeyboardInterrupt:
        rundir.mark_state(run_dir, "interrupted", "Ctrl-C or SIGTERM: the run stopped before it finished")
        raise
    except BaseException as exc:
        rundir.mark_state(run_dir, "failed", f"{type(exc).__name__}: {exc}")
        raise
    rundir.mark_state(run_dir, "finished")
    return result
