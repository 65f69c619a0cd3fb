"""The seed's scale beside this run: a shipped run of the same workload at n = 512 on the ns-3 twin.

The main job runs 32 GPUs on the emulator; the seed measured 512. An experiment names a shipped result of the
scale run (``scale_result:``, a file ``extract`` writes from a finished run directory: its headline, where the
congestion was, what it ran and on which commit, the command that made it in ``how``), ``run`` copies it into the
run directory as ``scale_result.json``, and the report shows its headline figures beside this run's, each with
its interval and verdict, and how far the calibration at that scale came from the seed's ablation. ``check``: an
earlier scale result of the same workload on another engine (the flow-level result keeps the twin's beside it),
shown under it.
"""

from __future__ import annotations

import json
from pathlib import Path

from common.paths import shown
from testbed.report import ep_tail
from testbed.report import html as H
from testbed.report.fmt import num

FILE = "scale_result.json"
FIGURES = ("throughput_tokens_per_s", "ttft_ms.p50", "ttft_ms.p99")


def extract(run_dir: Path, how: str | None = None, check: dict | None = None) -> dict:
    """The shipped document of a finished run directory whose report was built (its summary.json); ``how``: the
    command that made the run, ``check``: another engine's document of the same workload, kept beside it."""
    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    exp = (json.loads((run_dir / "experiment.json").read_text()).get("experiment")) or {}
    versions = json.loads((run_dir / "versions.json").read_text()) if (run_dir / "versions.json").is_file() else {}
    h = summary.get("headline") or {}
    from testbed.report import port_classes
    from testbed.report.load import load_experiment

    loaded = load_experiment(run_dir)
    sums = {f: [r.summary for r in loaded.reps[f]] for f in loaded.fabrics}
    per_server = exp.get("gpus_per_server") or 8
    tails = {f: ep_tail.figures(loaded.reps[f][0].path, per_server) for f in loaded.fabrics if loaded.reps[f]}
    serving, link = exp.get("serving") or {}, exp.get("link") or {}
    return {"dir": shown(run_dir), "commit": versions.get("git"), "created": (summary.get("run_id") or run_dir.name),
            "backend": exp.get("backend"), "gpus": exp.get("gpus"), "concurrency": serving.get("concurrency"),
            "represents": link.get("represents"), "time_dilation": link.get("time_dilation"),
            "duration_s": (exp.get("trace") or {}).get("duration_s"), "warmup_s": serving.get("warmup_s"),
            "workload": (exp.get("trace") or {}).get("workload"), "repetitions": exp.get("repetitions"),
            "headline": {k: h.get(k) for k in ("reps", "pairs", "between_run", "warning", "figures",
                                                "requests_measured", "fidelity_ok")},
            "congestion": port_classes.sentence(sums), "ep_tail": tails, "calibration": summary.get("calibration"),
            "how": how,
            "check": check}


def section(doc: dict, this_run: dict | None) -> str:
    """The table: this run's headline figures and the shipped scale run's, each ZCube, ROFT, the ratio with its
    95 % interval and verdict; then what the scale run was, and its congestion sentence."""
    here = (this_run or {}).get("figures") or {}
    there = (doc.get("headline") or {}).get("figures") or {}
    rows = []
    for key in FIGURES:
        for label, f in (("this run", here.get(key)), (f"n={doc.get('gpus')} ({doc.get('backend')})", there.get(key))):
            if not f:
                continue
            ci = f.get("ci95")
            rows.append([H.escape(f.get("label") or key), H.escape(label), num((f.get("zcube") or {}).get("median")),
                         num((f.get("roft") or {}).get("median")), num(f.get("ratio"), digits=4),
                         "-" if not ci else f"[{ci[0]:.4g}, {ci[1]:.4g}]", H.escape(str(f.get("verdict") or "-"))])
    head = ["figure", "run", "ZCube", "ROFT", "ZCube / ROFT", "95% interval", "verdict"]
    parts = [H.table(head, rows, left={0, 1, 6})] if rows else []
    cal = doc.get("calibration") or {}
    what = (f"The scale run: {doc.get('gpus')} GPUs on the {doc.get('backend')} backend, {doc.get('workload')}, "
            f"{doc.get('concurrency')} sessions in flight, {doc.get('repetitions')} repetition(s) a fabric of "
            f"{doc.get('duration_s')} cluster s ({doc.get('warmup_s')} s warm-up), links standing for "
            f"{num((doc.get('represents') or 0) / 1e9)} Gbit/s; {origin(doc)}.")
    if cal.get("distance") is not None:
        what += (f" Its load is the calibration's: distance {cal['distance']:.3f} to the seed's ablation "
                 f"({'within' if cal.get('within_resolution') else 'not within'} the testbed's resolution).")
    parts.append(f"<p>{H.escape(what)}</p>")
    if doc.get("congestion"):
        parts.append(f"<p>At that scale: {H.escape(doc['congestion'])}</p>")
    if doc.get("ep_tail"):
        parts.append(f"<p>The expert-parallel tail there (repetition 1, testbed.report.ep_tail): "
                     f"{H.escape(ep_tail.sentence(doc['ep_tail']))}.</p>")
    check = doc.get("check")
    if check and check.get("ep_tail"):
        source = check.get("ep_tail_source") or f"the {check.get('backend')} run above"
        parts.append(f"<p>The check's ({H.escape(source)}): "
                     f"{H.escape(ep_tail.sentence(check['ep_tail']))}.</p>")
    return "\n".join(parts)


def origin(doc: dict) -> str:
    """Where the figures come from: computed live by this run (``testbed.experiment.scale_live``) or the shipped
    file, and why the shipped one when the run could have computed it."""
    if doc.get("shown") == "live":
        return f"LIVE: {doc.get('why')}, {doc.get('dir')}"
    why = f"; {doc['why']}" if doc.get("why") else ""
    return f"shipped {doc.get('dir')} at commit {doc.get('commit')}{why}"


def lines(doc: dict) -> list[str]:
    """The terminal's lines for a shipped scale result: each figure's ratio, interval and verdict."""
    out = [f"at the seed's scale ({doc.get('gpus')} GPUs, {doc.get('backend')}, {doc.get('concurrency')} in flight, "
           f"{doc.get('repetitions')} repetition(s); {origin(doc)}):"]
    for key in FIGURES:
        f = ((doc.get("headline") or {}).get("figures") or {}).get(key)
        if f:
            ci = f.get("ci95")
            out.append(f"  {f.get('label') or key}: ZCube / ROFT {num(f.get('ratio'), digits=4)} "
                       f"{'[' + f'{ci[0]:.4g}, {ci[1]:.4g}' + ']' if ci else '(no interval)'} {f.get('verdict')}")
    if doc.get("congestion"):
        out.append(f"  {doc['congestion']}")
    check = doc.get("check")
    if check:
        out += ["  the check, " + lines(check)[0]] + [f"  {line}" for line in lines(check)[1:]]
    return out


def report_section(run_dir: Path, summary: dict) -> str | None:
    """The section for a run directory that carries a scale result (None otherwise)."""
    path = Path(run_dir) / FILE
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return f"<p class=\"warn\">{H.escape(FILE)} cannot be read</p>"
    return section(doc, summary.get("headline"))


def main(argv: list[str] | None = None) -> int:
    """``python -m testbed.report.scale_result RUN_DIR OUT.json [--how COMMAND] [--check EARLIER.json]``: write the
    shipped document of a finished run (``--check``: keep another engine's document beside it)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m testbed.report.scale_result")
    p.add_argument("run_dir")
    p.add_argument("out")
    p.add_argument("--how", help="the command that made the run directory")
    p.add_argument("--check", help="a scale_result.json of the same workload on another engine, kept as 'check'")
    args = p.parse_args(argv)
    check = json.loads(Path(args.check).read_text()) if args.check else None
    if check is not None:
        check.pop("check", None)
    Path(args.out).write_text(json.dumps(extract(Path(args.run_dir), args.how, check), indent=1) + "\n")
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
