"""``testbed sensitivity``: does the verdict survive a different, equally defensible assumption?

The experiment runs once as given (the baseline) and once per alternative its file declares
(``sensitivity:``, each a few keys set as ``--set`` would set them), on both fabrics, each a complete
``run`` directory the report reads. Every alternative is resolved and checked (key paths, values, the
consumers' rules) before anything is built. Layout:

    reports/<YYYYmmdd-HHMMSS>-sensitivity-<name>/
      sensitivity.json          the baseline's and every alternative's ZCube/ROFT ratios (rewritten after each)
      baseline/                 the experiment as given: a run directory (its report shows the table)
      alternatives/<name>/      one run directory per alternative

For each run: the ZCube/ROFT ratios of output tokens/s, TTFT P50 and TTFT P99 with their 95 % intervals over
the repetitions (the report's, ``testbed.report.confidence``, read from the run's summary.json; with one
repetition there is none, only the interval within that run, ``within_run_ci95``), the verdict on each of
``VERDICT_KEYS`` as the headline decides it (better / worse / not resolved; one repetition resolves nothing), the spread
of the ratio over the repetitions (repetition k of ZCube over repetition k of ROFT: [min, max]) and
whether the run was fidelity-ok. ``same_verdict``: the alternative ran and reached the baseline's verdict
on every one of ``VERDICT_KEYS``. An alternative whose run failed or was not fidelity-ok stays in the
document, marked so.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from common.errors import TestbedError
from testbed.experiment import run, rundir
from testbed.experiment.schema import DEFAULT_EXPERIMENT, Override, Resolved, resolve
from testbed.report import verdict as report_verdict
from testbed.report.headline import NOT_MEASURED, NOT_RESOLVED, SPREAD_UNKNOWN  # noqa: F401 (the verdicts' names)

FILE = "sensitivity.json"
RATIO_KEYS = ("throughput_tokens_per_s", "ttft_ms.p50", "ttft_ms.p99")
# the verdict: the seed's two claims, the headline's first rows (docs/serving.md, Sensitivity)
VERDICT_KEYS = ("throughput_tokens_per_s", "ttft_ms.p99")
HIGHER_IS_BETTER = {"throughput_tokens_per_s": True, "ttft_ms.p50": False, "ttft_ms.p99": False}
HEADLINE_KEY = {"throughput_tokens_per_s": "throughput_tokens_per_s", "ttft_ms.p50": "ttft_p50_ms",
                "ttft_ms.p99": "ttft_p99_ms"}  # testbed.experiment.run.headline's names
BUDGET_S = 3600.0  # the shipped default set, one repetition each (issue 24)
REPORT_S = 15.0  # a run directory's report (figures from every repetition's files), on a fabric that runs in real time
ORIGIN = "sensitivity"


@dataclass(frozen=True)
class Planned:
    """One run of the sensitivity: the baseline (``overrides`` empty) or an alternative."""

    name: str
    assumption: str | None
    overrides: dict
    resolved: Resolved

    @property
    def rel(self) -> Path:
        return Path("baseline") if self.name == "baseline" else Path("alternatives") / self.name

    @property
    def estimate_s(self) -> float:
        backend = self.resolved.backend
        return run.estimate_s(self.resolved.experiment, backend) + (REPORT_S if backend.realtime else 0.0)


def parse_only(text: str | None) -> list[str] | None:
    """'a,b' -> ['a', 'b'] (None: every alternative)."""
    if text is None:
        return None
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise TestbedError(f"--only {text!r}: expected alternative names, e.g. --only pair-hash,single-node")
    return names


def _value(key: str, value, base: Path):
    """An alternative's value as its override carries it: a relative trace.path is the experiment file's
    folder's, as the file's own trace.path is (``apply_overrides`` reads a command line's relative to cwd)."""
    if key == "trace.path" and isinstance(value, str) and not Path(value).expanduser().is_absolute():
        return str((base / Path(value).expanduser()).resolve())
    return value


def _comparable(exp) -> dict:
    return exp.model_dump(mode="json", exclude={"name", "sensitivity", "sensitivity_result"})


def plan(path: str | Path | None, overrides: list[Override], only: list[str] | None = None) -> list[Planned]:
    """The baseline and every alternative (``only``: those named), each resolved and checked: an unknown
    key, a bad value or an alternative that changes nothing is one line naming the alternative and the key,
    before any directory or fabric exists."""
    file = Path(DEFAULT_EXPERIMENT if path is None else path)
    base_dir = file.resolve().parent
    label = "default experiment" if path is None else str(file)
    no_result = [Override("sensitivity_result", None, ORIGIN)]  # its own result goes into the baseline at the end
    baseline = resolve(path, list(overrides) + no_result)
    exp = baseline.experiment
    if not {"zcube", "roft"} <= set(exp.fabrics):
        raise TestbedError(f"{label}: fabrics: a sensitivity compares ZCube with ROFT: expected both "
                           f"(got {', '.join(exp.fabrics)})")
    alternatives = list(exp.sensitivity)
    if not alternatives:
        raise TestbedError(f"{label}: sensitivity: no alternative declared: expected a list of "
                           "{name, set: {key: value}}, e.g. - {name: pair-hash, set: {serving.policy: pair-hash}}")
    known = [a.name for a in alternatives]
    if only is not None:
        unknown = [n for n in only if n not in known]
        if unknown:
            raise TestbedError(f"--only {unknown[0]}: no such alternative in {label} (known: {', '.join(known)})")
        alternatives = [a for a in alternatives if a.name in only]
    out = [Planned("baseline", None, {}, baseline)]
    for alt in alternatives:
        origin = f"alternative {alt.name!r}"
        extra = [Override(k, _value(k, v, base_dir), origin) for k, v in alt.set.items()]
        strip = [Override("sensitivity", [], ORIGIN), *no_result]  # an alternative is not itself a sensitivity
        try:
            resolved = resolve(path, list(overrides) + extra + strip)
        except TestbedError as exc:
            message = str(exc)
            if origin not in message:  # a rule whose key path is not the alternative's own (e.g. a layout's)
                message = f"{message} ({origin}: {', '.join(f'{k}={v}' for k, v in alt.set.items())})"
            raise TestbedError(message, key=exc.key) from None
        if _comparable(resolved.experiment) == _comparable(exp):
            raise TestbedError(f"{label}: {origin}: {', '.join(alt.set)} changes nothing: the experiment as given "
                               "already has " + ", ".join(f"{k}={v}" for k, v in alt.set.items()))
        out.append(Planned(alt.name, alt.assumption, dict(alt.set), resolved))
    return out


def estimate_s(planned: list[Planned]) -> float:
    """Every run's estimate, and the baseline's report once more at the end (with the table)."""
    return sum(p.estimate_s for p in planned) + (REPORT_S if planned[0].resolved.backend.realtime else 0.0)


def estimate_lines(planned: list[Planned]) -> list[str]:
    """What the sensitivity will cost, before it runs: each run's estimate (``run``'s, plus its report) and
    the total against the budget of the shipped set."""
    base = planned[0].resolved.experiment
    alts = [p.name for p in planned[1:]]
    lines = [f"sensitivity of {base.name}: the baseline and {len(alts)} alternative(s) ({', '.join(alts)}), each "
             f"on {', '.join(base.fabrics)}, {base.repetitions} repetition(s), backend {base.backend}"]
    report = f" + ~{REPORT_S:g} s report" if planned[0].resolved.backend.realtime else ""
    for p in planned:
        lines.append(f"  {p.name}: {run.estimate_text(p.resolved.experiment, p.resolved.backend)}{report}")
    total = estimate_s(planned)
    fits = "within" if total <= BUDGET_S else f"OVER by {run.minutes(total - BUDGET_S)}"
    again = f" + the baseline's report again ~{REPORT_S:g} s" if report else ""
    lines.append(f"estimated wall time: {len(planned)} runs{again} = ~{run.minutes(total)} (budget of the shipped "
                 f"set {BUDGET_S / 60:g} min: {fits})")
    return lines


def dry_run_doc(planned: list[Planned]) -> dict:
    return {"source": planned[0].resolved.source, "estimate_s": round(estimate_s(planned)), "budget_s": BUDGET_S,
            "runs": [{"name": p.name, "assumption": p.assumption, "overrides": p.overrides, "dir": str(p.rel),
                      "estimate_s": round(p.estimate_s),
                      "resolved_overrides": [o.as_dict() for o in p.resolved.overrides],
                      "experiment": p.resolved.experiment.model_dump(mode="json")} for p in planned]}


# --------------------------------------------------------------- outcomes
def verdict_of(summary: dict, key: str) -> str:
    """better / worse (ZCube's side) / not resolved, as the headline decides it (``testbed.report.verdict.
    verdict_of``: the ratio's 95 % interval over the repetitions excluding 1; one repetition resolves nothing);
    'not measured' without a ratio."""
    return report_verdict.verdict_of(summary, key)


def same_verdict(baseline: dict, alternative: dict) -> bool:
    """Both ran and the alternative reached the baseline's verdict on every one of VERDICT_KEYS."""
    if baseline.get("status") != "ok" or alternative.get("status") != "ok":
        return False
    b, a = baseline.get("verdicts") or {}, alternative.get("verdicts") or {}
    return all(b.get(k) == a.get(k) and b.get(k) is not None for k in VERDICT_KEYS)


def ratio_spread(heads: dict) -> dict:
    """Per ratio key, [min, max] of repetition k of ZCube over repetition k of ROFT (same seed) over the
    repetitions where both were measured; None where none was. ``heads``: headline.json's ``fabrics``."""
    def values(fabric: str, key: str) -> dict:
        reps = (heads.get(fabric) or {}).get("repetitions") or []
        return {r.get("rep"): r.get(key) for r in reps}

    out = {}
    for key, head in HEADLINE_KEY.items():
        z, r = values("zcube", head), values("roft", head)
        pairs = [z[k] / r[k] for k in z if k in r and z[k] is not None and r[k]]
        out[key] = [round(min(pairs), 4), round(max(pairs), 4)] if pairs else None
    return out


def from_summary(summary: dict, heads: dict) -> dict:
    """A run's entry from its report summary.json and its headline.json."""
    conf = ((summary.get("confidence") or {}).get("ratios")) or {}
    ratios = {k: (summary.get("ratios") or {}).get(k) for k in RATIO_KEYS}
    have = all(ratios[k] is not None for k in VERDICT_KEYS)
    return {"status": "ok" if have else "failed",
            "error": None if have else "no ZCube/ROFT ratio of " + " or ".join(k for k in VERDICT_KEYS
                                                                                if ratios[k] is None),
            "ratios": ratios, "ci95": {k: (conf.get(k) or {}).get("ci95") for k in RATIO_KEYS},
            "pairs": {k: (conf.get(k) or {}).get("pairs") for k in RATIO_KEYS},
            "within_run_ci95": {k: _within_one(conf.get(k)) for k in RATIO_KEYS},
            "verdicts": {k: verdict_of(summary, k) for k in RATIO_KEYS}, "spread": ratio_spread(heads),
            "fidelity_ok": bool(summary.get("fidelity_ok")) and have,
            "fidelity_problems": list(summary.get("fidelity_problems") or [])[:10]}


def _within_one(conf: dict | None) -> list | None:
    """With one repetition pair, its ratio's 95 % interval within that run (the only interval there is; it
    leaves the between-run spread out, so it never decides the verdict); None otherwise."""
    per = (conf or {}).get("per_rep") or []
    return per[0].get("within_ci95") if len(per) == 1 else None


def _read(path: Path) -> dict | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def outcome(run_dir: Path) -> dict:
    """A finished run directory's entry: from the summary.json its report wrote, else computed again from its
    files the way the report does (a report that failed on a figure still yields the numbers)."""
    heads = (_read(run_dir / "headline.json") or {}).get("fabrics") or {}
    summary = _read(run_dir / "summary.json")
    if summary is None or "ratios" not in summary:
        try:
            from testbed.report.build import summarize
            from testbed.report.load import load_experiment

            summary = summarize(load_experiment(run_dir))
        except Exception as exc:  # no repetition finished, unreadable files: the run failed, say why
            return failed(f"{type(exc).__name__}: {exc}")
    return from_summary(summary, heads)


def failed(error: str, status: str = "failed") -> dict:
    return {"status": status, "error": error, "ratios": dict.fromkeys(RATIO_KEYS),
            "ci95": dict.fromkeys(RATIO_KEYS), "pairs": dict.fromkeys(RATIO_KEYS),
            "within_run_ci95": dict.fromkeys(RATIO_KEYS), "verdicts": dict.fromkeys(RATIO_KEYS, NOT_MEASURED),
            "spread": dict.fromkeys(RATIO_KEYS), "fidelity_ok": False, "fidelity_problems": []}


def document(planned: list[Planned], results: dict[str, dict], sens_dir: Path, versions: dict,
             created: str, only: list[str] | None = None) -> dict:
    """sensitivity.json: the baseline's and every alternative's entry (``results``: name -> entry; an
    alternative without one has not run), ``same_verdict`` against the baseline's."""
    base_p = planned[0]
    base = results.get("baseline") or failed("not run yet", "not run")
    exp = base_p.resolved.experiment
    alts = []
    for p in planned[1:]:
        entry = results.get(p.name) or failed("not run (the sensitivity stopped before it)", "not run")
        alts.append({"name": p.name, "assumption": p.assumption, "overrides": p.overrides,
                     "dir": str(sens_dir / p.rel), **entry, "same_verdict": same_verdict(base, entry)})
    return {"source": base_p.resolved.source, "name": exp.name, "dir": str(sens_dir), "created": created,
            "versions": versions, "backend": exp.backend, "repetitions": exp.repetitions,
            "fabrics": list(exp.fabrics), "verdict_keys": list(VERDICT_KEYS),
            "overrides": [o.as_dict() for o in base_p.resolved.overrides if o.origin != ORIGIN],
            "estimate_s": round(estimate_s(planned)), "only": only,
            "baseline": {"name": "baseline", "dir": str(sens_dir / base_p.rel), **base,
                         "experiment": exp.model_dump(mode="json", exclude={"sensitivity", "sensitivity_result"})},
            "alternatives": alts}


def _write(sens_dir: Path, doc: dict) -> None:
    tmp = sens_dir / f".{FILE}.tmp"
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(sens_dir / FILE)


def table(doc: dict) -> list[str]:
    """The terminal's table: one row a run, then the sentence naming what the verdict depends on."""
    from testbed.report.sensitivity_section import cell_ratio, same_cell, sentence

    rows = [("run", "overrides", "output tokens/s Z/R [95% CI]", "TTFT P99 Z/R [95% CI]", "same verdict",
             "fidelity")]
    for e in [doc["baseline"], *doc["alternatives"]]:
        over = ", ".join(f"{k}={v}" for k, v in (e.get("overrides") or {}).items()) or "(as given)"
        fid = "ok" if e.get("fidelity_ok") else ("-" if e.get("status") != "ok" else "NOT ok")
        same = "(baseline)" if e is doc["baseline"] else same_cell(e)
        rows.append((e["name"], over, cell_ratio(e, "throughput_tokens_per_s"), cell_ratio(e, "ttft_ms.p99"),
                     same, fid))
    return run.columns(rows) + [sentence(doc)]


# --------------------------------------------------------------------- run
def run_sensitivity(path: str | Path | None, overrides: list[Override], out_root: Path,
                    only: list[str] | None = None, log: run.Log = run.stderr_log) -> tuple[int, dict, Path]:
    """The ``sensitivity`` verb: check every run, estimate, run the baseline then each alternative (a run that
    fails is recorded and the next goes on), sensitivity.json after each; at the end the baseline's report is
    rebuilt with the table. (worst exit status, the document, the sensitivity directory)."""
    planned = plan(path, overrides, only)
    for p in planned:
        run.requests_served(p.resolved.experiment)
    for line in estimate_lines(planned):
        log(line)
    base = planned[0].resolved.experiment
    backend = planned[0].resolved.backend  # every run of a sensitivity is on the same backend
    backend.check(build_own=True)
    sens_dir = rundir.new_run_dir(Path(out_root), f"sensitivity-{base.name}")
    log(f"sensitivity directory {sens_dir}")
    versions = rundir.collect_versions()
    created = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    results: dict[str, dict] = {}
    worst = 0
    _write(sens_dir, document(planned, results, sens_dir, versions, created, only))
    for i, p in enumerate(planned, 1):
        log(f"== {i}/{len(planned)}: {p.name}" + (f" ({', '.join(f'{k}={v}' for k, v in p.overrides.items())})"
                                                  if p.overrides else " (the experiment as given)"))
        run_dir = sens_dir / p.rel
        run_dir.mkdir(parents=True)
        extra = {"sensitivity": {"dir": str(sens_dir), "run": p.name, "overrides": p.overrides}}
        try:
            status, _ = run.run_into(p.resolved, run_dir, backend, log, versions, extra=extra)
            results[p.name] = outcome(run_dir)
        except KeyboardInterrupt:
            results[p.name] = failed("interrupted (Ctrl-C or SIGTERM)", "interrupted")
            _write(sens_dir, document(planned, results, sens_dir, versions, created, only))
            raise
        except Exception as exc:
            status = 1
            results[p.name] = failed(f"{type(exc).__name__}: {exc}")
            log(f"{p.name} FAILED: {exc}; going on")
        if results[p.name]["status"] != "ok":
            status = max(status, 1)
        worst = max(worst, status)
        _write(sens_dir, document(planned, results, sens_dir, versions, created, only))
    doc = document(planned, results, sens_dir, versions, created, only)
    _into_baseline(sens_dir, planned[0], log)
    return worst, doc, sens_dir


def _into_baseline(sens_dir: Path, baseline: Planned, log: run.Log) -> None:
    """The baseline's report shows this sensitivity's table: its sensitivity.json there, the report again."""
    run_dir = sens_dir / baseline.rel
    if not (run_dir / "runs").is_dir():
        return
    shutil.copyfile(sens_dir / FILE, run_dir / FILE)
    run.build_report(run_dir, log)
