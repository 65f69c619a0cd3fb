"""``testbed run``: every fabric x every repetition of one experiment, one after the other, into one
run directory.

One directory because the report compares fabrics on exactly the same traffic: it needs all their
repetitions, the resolved config and the versions side by side (``testbed.experiment.rundir``: its files
before the first repetition and its lifecycle). Besides those, ``run`` writes:

      runs/<fabric>/rep<k>/   one repetition's run directory each (summary.json, ...) or error.txt
      headline.json      per fabric: every repetition's figures and their spread (testbed.report.headline)
      report.html, summary.json   written by testbed.report.build_report

The backend is resolved once (``Resolved.backend``) and passed down as an object; each repetition gets its
``RepetitionSpec`` (``testbed.experiment.schema.repetition_spec``) and runs with
``testbed.repetition.orchestrate.run_repetition``.
"""

from __future__ import annotations

import functools
import json
import math
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from common.errors import EnvironmentProblem, TestbedError
from testbed.backends.base import Backend
from testbed.experiment import pool, rundir, scale_live
from testbed.experiment.schema import Resolved, repetition_spec, resolve
from testbed.repetition.orchestrate import run_repetition
from testbed.repetition.spec import served_source
from testbed.report import headline, workload

Log = Callable[[str], None]
Progress = Callable[["PlannedRepetition", dict], None]  # told each repetition and its outcome as it ends


def stderr_log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ----------------------------------------------------------------- entry
def run_experiment(resolved: Resolved, out_root: Path, log: Log = stderr_log, out: Log = print,
                   backend: Backend | None = None) -> int:
    """The ``run`` verb: check, estimate, run everything, print the report's headline (``report_headline``) and
    the run directory last.
    ``backend``: the experiment's own (``resolved.backend``) unless given."""
    exp = resolved.experiment
    backend = backend or resolved.backend
    log(f"serving: {workload.served_text(served(exp))}")  # first: whose requests the figures will be
    log(f"experiment {exp.name}: {', '.join(exp.fabrics)} with {exp.gpus} GPUs, {exp.serving.model} TP "
        f"{exp.serving.prefill_tp}->{exp.serving.decode_tp}, {exp.link.rate / 1e6:g} Mbit/s links, PFC "
        f"{'on' if exp.pfc.enabled else 'off'}")
    log(f"estimated wall time: {estimate_text(exp, backend)}")
    backend.check(build_own=True)  # each fabric is built with the experiment's own link settings
    started = time.monotonic()
    run_dir = rundir.new_run_dir(Path(out_root), exp.name)
    log(f"run directory {run_dir}")
    versions = rundir.collect_versions()
    between = None
    if exp.scale_result:  # the seed's scale, computed again when the budget lets it (testbed.experiment.scale_live)
        between = functools.partial(_scale_live, resolved, run_dir, started, versions, log)
    status, _ = run_into(resolved, run_dir, backend, log, versions, between=between)
    for line in report_headline(run_dir):
        out(line)
    out(str(run_dir))
    return status


def _scale_live(resolved: Resolved, run_dir: Path, started: float, versions: dict, log: Log) -> None:
    """The run directory's shipped scale result replaced by a live one when ``scale_live`` and the budget let it
    (``testbed.experiment.scale_live``); the document says which it shows and why."""
    from testbed.report import scale_result

    path = run_dir / scale_result.FILE
    shipped = json.loads(path.read_text())
    mode = resolved.experiment.scale_live
    main_job = resolved.backend.realtime and not rundir.changed_workload_keys(resolved)
    why = scale_live.why_shipped(mode, main_job)  # before anything is resolved
    if why is None:
        try:
            live = resolve(resolved.source, scale_live.live_overrides(resolved, shipped))
        except TestbedError as exc:  # the run's own overrides may not fit the live engine: say so, show the file
            live, why = None, f"not computed live: {exc}"
    if why is None:
        need_s = estimate_s(live.experiment, live.backend)
        left_s = scale_live.BUDGET_S - (time.monotonic() - started)
        why = scale_live.why_shipped(mode, main_job, need_s, left_s, minutes)
    if why is None:
        exp, out = live.experiment, run_dir / scale_live.FOLDER
        log(f"at the seed's scale, live: {exp.gpus} GPUs on the {exp.backend} backend, {exp.repetitions} "
            f"repetitions a fabric of {exp.trace.duration_s:g} cluster s (estimated {minutes(need_s)}, "
            f"{minutes(max(left_s, 0))} of the budget left) -> {out}")
        out.mkdir()
        t0 = time.monotonic()
        status, _ = run_into(live, out, live.backend, lambda m: log(f"scale: {m}"), versions)
        if status == 0 and (out / "summary.json").is_file():
            scale_live.write_live(path, out, shipped, mode, minutes(time.monotonic() - t0))
            return
        why = f"the live run failed (exit {status}, {out}): the shipped result instead"
    log(f"at the seed's scale: the shipped result ({why})")
    scale_live.write_shipped(path, shipped, why)


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
    """(wall seconds of the run itself, set-up seconds) of one repetition on ``backend`` (on a held fabric:
    ``held_setup_s``); with a model of the backend's own cost (the ns-3 twin's), (0, its estimate)."""
    own = backend.estimate(exp)
    if own is not None:
        return 0.0, own[0]
    setup = backend.held_setup_s if holds_fabrics(exp, backend) else backend.setup_s
    return (replayed_s(exp) if backend.realtime else 0.0), setup


def _per_fabric(exp, backend: Backend) -> float:
    """Set-up seconds once per fabric (bring-up and teardown of a held fabric)."""
    return backend.fabric_setup_s if holds_fabrics(exp, backend) else 0.0


def _waves(exp, backend: Backend) -> int:
    """Repetitions one after the other: all of them, or ceil(all / jobs) when ``jobs_for`` runs several at once."""
    total = len(exp.fabrics) * exp.repetitions
    if holds_fabrics(exp, backend):
        return total
    return math.ceil(total / jobs_for(exp, backend, total))


def estimate_s(exp, backend: Backend) -> float:
    """waves of repetitions x (replayed wall time + set-up overhead, or the backend's own model of a
    repetition) + fabrics x a held fabric's bring-up and teardown, plus what the backend spends once per
    process (``_waves``: fabrics x repetitions, fewer when several run at once)."""
    return (backend.once_s + _waves(exp, backend) * sum(_per_repetition(exp, backend))
            + len(exp.fabrics) * _per_fabric(exp, backend))


def estimate_text(exp, backend: Backend) -> str:
    run_s, setup_s = _per_repetition(exp, backend)
    own = backend.estimate(exp)
    if own is not None:
        each = f"~{minutes(own[0])}: {own[1]}"
    else:
        each = f"{replayed_s(exp):g} s replayed + ~{setup_s:g} s set-up" if run_s else f"~{setup_s:g} s of computing"
    fabric = _per_fabric(exp, backend)
    per_fabric = f" + ~{fabric:g} s a fabric" if fabric else ""
    once = f" + ~{backend.once_s:g} s once" if backend.once_s else ""
    waves, total = _waves(exp, backend), len(exp.fabrics) * exp.repetitions
    at_once = f", {math.ceil(total / waves)} at once" if waves < total else ""
    return (f"{len(exp.fabrics)} fabric(s) x ({exp.repetitions} repetition(s) x ({each}){per_fabric}){once}"
            f"{at_once} = ~{minutes(estimate_s(exp, backend))}")


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


def served(exp) -> dict:
    """What the run serves (``testbed.repetition.spec.served_source``: the drivers' own requests), as
    experiment.json's ``served`` records it; an empty slice fails here, before any directory or fabric exists."""
    return served_source(repetition_spec(exp, exp.fabrics[0]))


def requests_served(exp) -> int:
    """Requests the run serves (``served``)."""
    return served(exp)["requests"]


def _write_error(target: Path, text: str) -> None:
    target.mkdir(parents=True, exist_ok=True)
    (target / "error.txt").write_text(text)


def _repetition_once(exp, t: "PlannedRepetition", backend: Backend, target: Path, log: Log) -> None:
    run_repetition(repetition_spec(exp, t.fabric, t.rep), backend, log=log, run_dir=target)


def holds_fabrics(exp, backend: Backend) -> bool:
    """Whether each fabric is built once for all its repetitions: the backend keeps fabrics (emulated) and the
    experiment changes none during a repetition (faults do; cross traffic is left to its own repetition too)."""
    return type(backend).hold is not Backend.hold and not exp.faults and not exp.cross_flows


def execution_order(exp, backend: Backend) -> list[list[PlannedRepetition]]:
    """The targets in the groups they run in: one group per fabric (fabric-major, the fabric held for the
    group: bring-up and teardown once per fabric) when ``holds_fabrics``, else one group of all of them,
    repetition-major (an interrupted run still has every fabric of its first repetitions)."""
    plan = targets(exp)
    if not holds_fabrics(exp, backend):
        return [plan]
    return [[t for t in plan if t.fabric == kind] for kind in exp.fabrics]


def execute(resolved: Resolved, run_dir: Path, backend: Backend, log: Log,
            progress: Progress | None = None) -> list[dict]:
    """Every target in turn (``execution_order``: on the emulated backend each fabric's repetitions on one
    fabric, built once). A repetition that failed for an environment reason (the machine, not the
    experiment: EnvironmentProblem) is retried once, on a fabric built anew, its first attempt kept beside
    it as ``rep<k>.attempt1/`` and named in ``retried.txt``. A failing repetition leaves error.txt in its
    folder and the loop goes on; Ctrl-C leaves a note there too and stops."""
    exp = resolved.experiment
    groups = execution_order(exp, backend)
    held = holds_fabrics(exp, backend)
    outcomes: list[dict] = []
    total = sum(len(g) for g in groups)
    done = 0
    for group in groups:
        if not held:
            outcomes += _execute_group(exp, group, backend, run_dir, log, done, total, None, progress)
            done += len(group)
            continue
        log(f"{group[0].fabric}: one fabric for its {len(group)} repetition(s)")
        fabric = backend.hold(repetition_spec(exp, group[0].fabric).fabric, log)
        try:
            fabric.__enter__()
        except Exception as exc:  # noqa: BLE001 - then each repetition builds its own (and reports why it fails)
            log(f"{group[0].fabric}: not built once for its repetitions ({type(exc).__name__}: {exc}); each "
                "repetition builds its own")
            fabric = None
        try:
            outcomes += _execute_group(exp, group, backend, run_dir, log, done, total, fabric, progress)
        finally:
            if fabric is not None:
                fabric.__exit__(None, None, None)
        done += len(group)
    return outcomes


def jobs_for(exp, backend: Backend, pending: int) -> int:
    """How many repetitions run at once (the experiment's ``jobs``): one on a backend that cannot run them in
    forked processes (the emulator: a live fabric needs the machine to itself; the ns-3 twin), else the number
    asked or the CPUs this process may use, at most ``pending`` and (auto) as many as the memory available holds
    by the backend's model of a repetition's peak."""
    if not backend.forks:
        return 1
    want = pool.cpus() if exp.jobs == "auto" else exp.jobs
    peak = backend.peak_bytes(exp)
    if exp.jobs == "auto" and peak:  # no more at once than the memory holds (n = 16,384: ~7 GB each)
        want = min(want, int(pool.MEMORY_SHARE * pool.available_bytes() // peak))
    return max(1, min(want, pending))


def _execute_group(exp, group: list[PlannedRepetition], backend: Backend, run_dir: Path, log: Log, done: int,
                   total: int, held, progress: Progress | None = None) -> list[dict]:
    jobs = 1 if held is not None else jobs_for(exp, backend, len(group))
    if jobs > 1:
        return _execute_at_once(exp, group, backend, run_dir, log, done, total, jobs, progress)
    outcomes = []
    for i, t in enumerate(group, done + 1):
        log(f"[{i}/{total}] {t.fabric}, repetition {t.rep} (seed {t.seed}) -> {run_dir / t.rel}")
        outcomes.append(_one_target(exp, t, backend, run_dir, log, held))
        if progress is not None:
            progress(t, outcomes[-1])
    return outcomes


def _execute_at_once(exp, group: list[PlannedRepetition], backend: Backend, run_dir: Path, log: Log, done: int,
                     total: int, jobs: int, progress: Progress | None) -> list[dict]:
    """``group`` with ``jobs`` repetitions at once (``testbed.experiment.pool``); outcomes in the group's order."""
    log(f"{len(group)} repetition(s), {jobs} at once (jobs {exp.jobs}: each in a process of its own)")
    outcomes: dict[int, dict] = {}
    bar = RepetitionBar("run")
    if progress is not None or not bar.start(len(group)):
        bar = None

    def ended(i: int, outcome: dict) -> None:
        outcomes[i] = outcome
        t = group[i]
        log(f"[{done + len(outcomes)}/{total}] {t.fabric}, repetition {t.rep}: {outcome['status']}"
            + (f" in {outcome['wall_s']} s" if "wall_s" in outcome else f" ({outcome.get('error')})"))
        if progress is not None:
            progress(t, outcome)
        if bar is not None:
            bar.step(t, outcome)

    def failed(i: int, why: str) -> dict:
        t = group[i]
        _write_error(run_dir / t.rel, f"{why}\n")
        return t.as_dict() | {"status": "error", "error": why, "retried": None}

    def interrupted(i: int) -> None:
        target = run_dir / group[i].rel
        if not (target / "error.txt").exists():
            _write_error(target, "interrupted (Ctrl-C): this repetition did not finish\n")

    works = []
    for t in group:
        log(f"{t.fabric}, repetition {t.rep} (seed {t.seed}) -> {run_dir / t.rel}")
        works.append((f"{t.fabric} rep{t.rep}", functools.partial(_one_target, exp, t, backend, run_dir, held=None)))
    try:
        pool.run_all(works, jobs, log if bar is None else bar.log, ended, failed, interrupted)
    finally:
        if bar is not None:
            bar.stop()
    return [outcomes[i] for i in range(len(group))]


class RepetitionBar:
    """A rich progress bar over repetitions on stderr, the log lines printed above it, when stderr is a terminal;
    plain lines on stderr otherwise (``scale``'s bar over every size, ``run``'s over repetitions at once)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar = self.task = None

    def log(self, message: str) -> None:
        if self.bar is not None:
            self.bar.console.print(message, markup=False, highlight=False)
        else:
            print(message, file=sys.stderr, flush=True)

    def start(self, total: int) -> bool:
        """Show the bar (only on a terminal); whether it shows."""
        if not sys.stderr.isatty():
            return False
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn(self.label), BarColumn(), MofNCompleteColumn(), TextColumn("repetitions"),
                            TimeElapsedColumn(), TextColumn("{task.description}"), console=Console(stderr=True))
        self.task = self.bar.add_task("", total=total)
        self.bar.start()
        return True

    def step(self, t, outcome: dict) -> None:
        """One more repetition ended (``Progress``'s signature)."""
        if self.bar is not None:
            self.bar.update(self.task, advance=1, description=f"last: {t.fabric} rep{t.rep} {outcome['status']}")

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def _one_target(exp, t: PlannedRepetition, backend: Backend, run_dir: Path, log: Log, held) -> dict:
    """One repetition into its folder: its outcome. An environment problem is retried once (the first attempt
    kept beside it); a failure leaves error.txt; Ctrl-C leaves a note and goes on up."""
    target = run_dir / t.rel
    target.parent.mkdir(parents=True, exist_ok=True)
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
            if held is not None:
                held.renew()
            _repetition_once(exp, t, backend, target, log)
            (target / "retried.txt").write_text(f"first attempt failed ({aside.name}/): {retried}\n")
    except KeyboardInterrupt:
        _write_error(target, "interrupted (Ctrl-C): this repetition did not finish\n")
        raise
    except Exception as exc:
        _write_error(target, f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}")
        log(f"{t.fabric} repetition {t.rep} FAILED: {exc} ({t.rel / 'error.txt'}); going on")
        return t.as_dict() | {"status": "error", "error": f"{type(exc).__name__}: {exc}", "retried": retried}
    return t.as_dict() | {"status": "ok", "wall_s": round(time.monotonic() - t0, 1), "retried": retried}


# ------------------------------------------------------------- results
def columns(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows of cells as left-aligned text columns two spaces apart (the terminal tables of run, sweep
    and calibrate)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def report_builder() -> Callable:
    """testbed.report.build_report, imported only now (the report is optional for a run)."""
    from testbed.report import build_report as build

    return build


def report_headline(run_dir: Path) -> list[str]:
    """The report's headline of the finished run directory, as text (``testbed.report.headline_lines``: the same
    figures as report.html); one line when testbed.report is not available."""
    try:
        from testbed.report import headline_lines
    except ImportError as exc:
        return [f"no headline: testbed.report is not available ({exc})"]
    return headline_lines(run_dir)


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


def finish(resolved: Resolved, run_dir: Path, outcomes: list[dict], log: Log,
           elapsed_s: float | None = None) -> tuple[int, dict]:
    """headline.json (``elapsed_s``: the repetitions' wall time from the first start to the last end, less than
    their sum when several ran at once), the report; exit status 1 if a repetition failed, lost transfers or the
    report failed."""
    exp = resolved.experiment
    heads = headline.fabric_headlines(run_dir, [t.as_dict() for t in targets(exp)])
    doc = {"fabrics": heads, "outcomes": outcomes, "elapsed_s": None if elapsed_s is None else round(elapsed_s, 1)}
    (run_dir / "headline.json").write_text(json.dumps(doc, indent=1) + "\n")
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


# ----------------------------------------------------------------- one run directory
def run_into(resolved: Resolved, run_dir: Path, backend: Backend, log: Log, versions: dict,
             extra: dict | None = None, progress: Progress | None = None,
             between: Callable[[], None] | None = None) -> tuple[int, dict]:
    """Fill an existing, empty run directory: set-up files, every repetition, headline, report; ``progress``:
    told each repetition as it ends; ``between``: called after the repetitions, before the report."""
    exp = resolved.experiment
    rundir.mark_state(run_dir, "running")
    try:
        rundir.start_run_dir(resolved, run_dir, versions, log, [t.as_dict() for t in targets(exp)],
                             estimate_s(exp, backend), {"served": served(exp)} | (extra or {}))
        t0 = time.monotonic()
        outcomes = execute(resolved, run_dir, backend, log, progress)
        elapsed_s = time.monotonic() - t0
        if between is not None:
            between()
        result = finish(resolved, run_dir, outcomes, log, elapsed_s)
    except KeyboardInterrupt:
        rundir.mark_state(run_dir, "interrupted", "Ctrl-C or SIGTERM: the run stopped before it finished")
        raise
    except BaseException as exc:
        rundir.mark_state(run_dir, "failed", f"{type(exc).__name__}: {exc}")
        raise
    rundir.mark_state(run_dir, "finished")
    return result
