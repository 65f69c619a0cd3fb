"""The cross-check: one experiment on two engines, compared repetition by repetition (``testbed.report.crosscheck``).

``run_crosscheck`` runs engine A (the reference: by default the emulator, as root) unless its run directory is
given, then engine B on the same experiment. When A is the emulator and B routes its connections itself (the
ns-3 twin, the flow-level engine), B follows A's recorded paths (``paths_from``: every connection on the ports
and paths Open vSwitch gave it, repetition by repetition) unless asked to use its own hash; two self-routing
engines share one rule (``testbed.backends.paths``), so with the same seeds they carry the same paths anyway.
``compare_only`` compares two finished runs. crosscheck.json goes into B's run directory and B's report is
built again with its cross-check section.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from common.errors import TestbedError
from testbed.report import crosscheck as xc

DEFAULT_ENGINES = ("emulated", "ns3")
FILE = "crosscheck.json"


def engines_of(text: str | None) -> tuple[str, str]:
    """'A,B' -> (A, B): two known backends, not the same one; a bad value is one line naming it."""
    from testbed import backends

    if text is None:
        return DEFAULT_ENGINES
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    if len(names) != 2 or names[0] == names[1] or any(n not in backends.NAMES for n in names):
        raise TestbedError(f"--engines {text!r}: expected two different backends of {', '.join(backends.NAMES)}, "
                           "e.g. emulated,ns3", key="engines")
    return names  # type: ignore[return-value]


def write(doc: dict, b_dir: Path) -> Path:
    """crosscheck.json in B's run directory (the samples left out), and B's report built again."""
    from testbed.report import build_report

    out = Path(b_dir) / FILE
    out.write_text(json.dumps(xc.strip(doc), indent=1) + "\n")
    build_report(b_dir)
    return out


def compare_only(a_dir: Path, b_dir: Path, ablation: tuple[Path, Path] | None = None) -> dict:
    """Two finished runs compared (and, given ``ablation``, the same two engines' runs at 100 Gbit/s: ROFT's
    200G/100G on each); crosscheck.json written into ``b_dir``."""
    from testbed import backends

    doc = xc.compare_runs(a_dir, b_dir, backends.ROUTE_THEMSELVES)
    if ablation is not None:
        doc["roft_200g_over_100g"] = xc.bandwidth_ablation(a_dir, b_dir, *ablation)
        doc["agreement"] = xc.agreement(doc)
    write(doc, b_dir)
    return doc


def run_crosscheck(experiment: str | None, overrides: list, out_root: Path, engines: tuple[str, str],
                   against: Path | None, own_paths: bool, log) -> tuple[dict, Path]:
    """Run what is missing of the two engines' runs and compare them; the document and B's run directory."""
    from testbed import backends
    from testbed.experiment import run
    from testbed.experiment.schema import Override, resolve

    a_name, b_name = engines
    a_dir = Path(against) if against is not None else None
    if a_dir is not None:
        if not (a_dir / "experiment.json").is_file():
            raise TestbedError(f"--against {a_dir}: no experiment.json: expected a run directory of `testbed run`",
                               key="against")
        a_name = json.loads((a_dir / "experiment.json").read_text())["experiment"].get("backend", a_name)

    def on(backend: str, extra: list) -> list:
        keep = [o for o in overrides if o.key != "backend"]
        return keep + [Override("backend", backend, "crosscheck")] + extra

    if a_dir is None:
        if a_name == "emulated" and os.geteuid() != 0:
            raise TestbedError("the emulated engine needs root: run as root, or give --against EMULATOR_RUN_DIR",
                               key="engines")
        a_dir = _run(resolve(experiment, on(a_name, [])), out_root, log, run)
    follow = a_name == "emulated" and b_name in backends.ROUTE_THEMSELVES and not own_paths
    extra = [Override("paths_from", str(a_dir), "crosscheck")] if follow else []
    b_dir = _run(resolve(experiment, on(b_name, extra)), out_root, log, run)
    doc = xc.compare_runs(a_dir, b_dir, backends.ROUTE_THEMSELVES)
    if doc["workload_differences"]:
        log("crosscheck: the two runs are not the same workload: they differ in "
            + ", ".join(doc["workload_differences"]))
    write(doc, b_dir)
    return doc, b_dir


def _run(resolved, out_root: Path, log, run) -> Path:
    seen: list[str] = []
    run.run_experiment(resolved, out_root, log=log, out=seen.append)
    return Path(seen[-1])


def table(doc: dict) -> list[str]:
    """The terminal's table: per repetition the ZCube/ROFT ratios on each engine, per fabric the figures and
    each message class's FCT on each engine, links and pauses; then the goals and the one-line verdict."""
    from testbed.experiment.run import columns

    f = xc._fmt
    a, b = doc["a"]["backend"], doc["b"]["backend"]
    rows = [("rep", "fabric", "figure", a, b, f"{b}/{a}", "KS")]
    for rep in doc["repetitions"]:
        k = f"rep{rep['rep']}"
        for key in ("throughput_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms"):
            ra, rb = rep["ratios"]["a"].get(key), rep["ratios"]["b"].get(key)
            rows.append((k, "zcube/roft", key, f(ra), f(rb), f(xc._ratio(rb, ra)), ""))
        for kind, fab in rep["fabrics"].items():
            for key in ("throughput_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "pfc_pauses"):
                rows.append((k, kind, key, _g(fab["a"][key]), _g(fab["b"][key]), f(fab["b_over_a"][key]), ""))
            for c, cc in fab["fct"].items():
                for q in ("p50", "p99"):
                    rows.append((k, kind, f"{c} FCT {q} ms", _g(cc["a"][q]), _g(cc["b"][q]), f(cc[f"{q}_b_over_a"]),
                                 f(cc["ks"]) if q == "p50" else ""))
            ds = fab["decode_step_ms"]
            rows.append((k, kind, "decode step p50 ms", _g(ds["a"]["p50"]), _g(ds["b"]["p50"]),
                         f(xc._ratio(ds["b"]["p50"], ds["a"]["p50"])), ""))
            lb = fab["link_bytes"]
            rows.append((k, kind, f"link bytes ({lb['links']} links)", "", "", f"median {f(lb['median'])}",
                         f"{f(lb['within'])} within"))
    lines = columns(rows)
    if doc.get("roft_200g_over_100g"):
        ab = doc["roft_200g_over_100g"]
        lines.append(f"ROFT 200G/100G: output tokens/s {f(ab['a']['throughput'])} ({a}) vs {f(ab['b']['throughput'])} "
                     f"({b}); TTFT P99 {f(ab['a']['ttft_p99'])} vs {f(ab['b']['ttft_p99'])}")
    held = ", ".join(f"{g} {h}/{n}" for g, (h, n) in doc["agreement"]["goals"].items())
    lines.append(f"goals held (repetitions): {held}")
    if doc.get("workload_differences"):
        lines.append("NOT the same workload: the runs differ in " + ", ".join(doc["workload_differences"]))
    lines.append(xc.line(doc))
    return lines


def _g(v) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)
