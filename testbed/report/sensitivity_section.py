"""The sensitivity table: does the verdict survive a different, equally defensible assumption?

A run directory holds ``sensitivity.json`` when the experiment names a shipped result
(``sensitivity_result:``, copied in by ``run``) or when it is the baseline of a ``testbed sensitivity``
(``testbed.experiment.sensitivity``, which writes the document). The report shows it first after the
headline: one row a run (alternative | what it sets | output tokens/s ratio | TTFT P99 ratio, each with
its 95 % interval | same verdict as the baseline? | fidelity), one sentence naming the assumptions the
verdict depends on, where the result came from and whether it is older than the code. An experiment that
declares alternatives but names no result gets a section saying none is shipped. Every alternative is
shown, the failed and the not fidelity-ok ones marked so.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from common.paths import shown
from testbed.report import html as H
from testbed.report import workload
from testbed.report.load import ExperimentRun

FILE = "sensitivity.json"
NAMES = {"throughput_tokens_per_s": "output tokens/s", "ttft_ms.p50": "TTFT P50", "ttft_ms.p99": "TTFT P99"}


# ------------------------------------------------------------------ cells and the sentence
def cell_ratio(entry: dict, key: str) -> str:
    """'1.080 [1.031, 1.124]' (the ratio, its 95 % interval over the repetitions); with one repetition '1.080 (1 rep;
    within the run [1.061, 1.099])' (an interval that leaves the between-run spread out); or why there is none."""
    if entry.get("status") != "ok":
        return f"run {entry.get('status') or 'failed'}"
    r = (entry.get("ratios") or {}).get(key)
    if r is None:
        return "not measured"
    ci = (entry.get("ci95") or {}).get(key)
    if ci and None not in ci:
        return f"{r:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"
    within = (entry.get("within_run_ci95") or {}).get(key)
    if within and None not in within:  # one repetition: the only interval is within that run
        return f"{r:.3f} (1 rep; within the run [{within[0]:.3f}, {within[1]:.3f}])"
    return f"{r:.3f}"


def same_cell(entry: dict) -> str:
    """'yes', 'NO', or why there is no answer; a run that was not fidelity-ok says so."""
    if entry.get("status") != "ok":
        return f"no verdict: the run {entry.get('status') or 'failed'}"
    text = "yes" if entry.get("same_verdict") else "NO"
    return text if entry.get("fidelity_ok") else f"{text} (fidelity not ok)"


def verdict_text(entry: dict, keys) -> str:
    """'output tokens/s: ZCube better; TTFT P99: not resolved at this sample size'."""
    v = entry.get("verdicts") or {}
    return "; ".join(f"{NAMES.get(k, k)}: " + (f"ZCube {v.get(k)}" if v.get(k) in ("better", "worse")
                                               else str(v.get(k) or "not measured")) for k in keys)


def _grouped(alts: list[dict]) -> str:
    """'the port policy (pair-hash, adaptive) and the layout (single-node)'."""
    groups: dict[str, list[str]] = {}
    for a in alts:
        groups.setdefault(a.get("assumption") or a["name"], []).append(a["name"])
    parts = [f"the {what} ({', '.join(names)})" if names != [what] else what for what, names in groups.items()]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def sentence(doc: dict) -> str:
    """One sentence: the baseline's verdict, which alternatives change it (the assumptions it depends on),
    under which it holds, and where the answer is unknown (a run that failed) or less sure (not fidelity-ok)."""
    base = doc.get("baseline") or {}
    keys = doc.get("verdict_keys") or ["throughput_tokens_per_s", "ttft_ms.p99"]
    if base.get("status") != "ok":
        return (f"The baseline did not run to a verdict ({base.get('error') or base.get('status')}): nothing to "
                "compare the alternatives with.")
    alts = doc.get("alternatives") or []
    ran = [a for a in alts if a.get("status") == "ok"]
    flipped = [a for a in ran if not a.get("same_verdict")]
    held = [a for a in ran if a.get("same_verdict")]
    unknown = [a for a in alts if a.get("status") != "ok"]
    shaky = [a["name"] for a in ran if not a.get("fidelity_ok")] + (["the baseline"] if not base.get("fidelity_ok")
                                                                    else [])
    text = f"The verdict ({verdict_text(base, keys)}) "
    text += (f"depends on {_grouped(flipped)}: each changes it on its own" if flipped else
             "depends on none of the assumptions tried" if ran else "was not tested against any alternative")
    if held:
        text += f"; it holds under {_grouped(held)}"
    if unknown:
        text += "; unknown under " + ", ".join(f"{a['name']} (the run {a.get('status')})" for a in unknown)
    if shaky:
        text += f"; not fidelity-ok: {', '.join(shaky)}"
    return text + "."


# ------------------------------------------------------------------ provenance
def _commits_between(old: str, new: str) -> int | None:
    """How many commits ``new`` is ahead of ``old`` (None: git cannot tell, e.g. a copied run directory)."""
    from common.paths import REPO

    try:
        proc = subprocess.run(["git", "rev-list", "--count", f"{old}..{new}"], cwd=REPO, capture_output=True,
                              text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return int(proc.stdout.strip()) if proc.returncode == 0 and proc.stdout.strip().isdigit() else None


def age_note(made_on: str | None, code: str | None, count=_commits_between) -> str | None:
    """Whether the result is older than the code this run is: None when both are the same clean commit."""
    if not made_on:
        return "It records no commit: whether it is older than the code cannot be told."
    if not code:
        return f"It was made on commit {made_on}; this run records no commit to compare with."
    old, new = made_on.removesuffix("-dirty"), code.removesuffix("-dirty")
    dirty = " (with uncommitted changes)" if made_on.endswith("-dirty") else ""
    if old == new:
        return None if not dirty else f"It was made on this run's commit {old}{dirty}."
    n = count(old, new)
    if not n:  # git cannot tell, or this run's commit is not after it (an older checkout, another branch)
        return (f"It was made on commit {old}{dirty}, this run on {new}: another version of the code, which may "
                "give other numbers (`testbed sensitivity` makes a new one).")
    return (f"It is older than the code: made on commit {old}{dirty}, {n} commit{'s' if n != 1 else ''} before "
            f"this run's {new}; the code may give other numbers now (`testbed sensitivity` makes a new one).")


def _differences(doc: dict, config: dict) -> list[str]:
    """Keys (dotted) where the sensitivity's baseline experiment differs from this run's workload
    (``testbed.report.workload.differences``: the keys that do not define a workload aside)."""
    a, b = (doc.get("baseline") or {}).get("experiment"), config.get("experiment")
    if not a or not b:
        return []
    return workload.differences(a, b)


# ------------------------------------------------------------------ the section
def _row(entry: dict, baseline: bool) -> list[str]:
    over = ", ".join(f"{k}={v}" for k, v in (entry.get("overrides") or {}).items())
    what = "the experiment as given" if baseline else over
    name = f"<b>{H.escape(entry['name'])}</b>" if baseline else H.escape(entry["name"])
    if entry.get("assumption") and not baseline:
        name += f' <span class="unit">({H.escape(entry["assumption"])})</span>'
    ok = entry.get("status") == "ok"
    same = "(the verdict)" if baseline else same_cell(entry)
    cls = "" if baseline or not ok else ("good" if entry.get("same_verdict") else "bad")
    fid = ("ok" if entry.get("fidelity_ok") else
           "NOT ok: " + "; ".join(entry.get("fidelity_problems") or ["see its report"])) if ok else (
        entry.get("error") or "-")
    cells = [name, H.escape(what), H.escape(cell_ratio(entry, "throughput_tokens_per_s")),
             H.escape(cell_ratio(entry, "ttft_ms.p99")), f'<td class="{cls} l">{H.escape(same)}</td>',
             f'<td class="l{"" if ok and entry.get("fidelity_ok") else " bad"}">{H.escape(fid[:300])}</td>']
    return cells


def section(doc: dict, run_dir: Path | None = None, config: dict | None = None, code: str | None = None,
            count=_commits_between) -> str:
    """The table, the sentence, where it came from and whether it is older than the code."""
    base = doc.get("baseline") or {}
    own = run_dir is not None and base.get("dir") and Path(base["dir"]).resolve() == Path(run_dir).resolve()
    made = (doc.get("versions") or {}).get("git")
    made_in = shown(doc["dir"]) if doc.get("dir") else str(doc.get("dir"))
    where = (f"Made by <code>testbed sensitivity</code> ({H.escape(made_in)}, created "
             f"{H.escape(str(doc.get('created') or 'an unknown date')[:16].replace('T', ' '))}, commit "
             f"{H.escape(str(made or 'unknown'))}, backend {H.escape(str(doc.get('backend')))}, "
             f"{H.escape(str(doc.get('repetitions')))} repetition(s) a fabric each): the experiment once as "
             "given (the baseline) and once per alternative, on both fabrics. ")
    where += ("This run is that baseline." if own else
              "Its baseline is its own run of the experiment, not this page's (the headline above); the "
              "ratios differ by as much as two runs of the same experiment do.")
    parts = [f"<p><b>{H.escape(sentence(doc))}</b></p>"]
    head = ["alternative", "what it sets", "output tokens/s ZCube / ROFT [95% interval]",
            "TTFT P99 ZCube / ROFT [95% interval]", "same verdict as the baseline?", "fidelity"]
    rows = [_row(base, True)] + [_row(a, False) for a in doc.get("alternatives") or []]
    parts.append(H.table(head, rows, left={0, 1, 4, 5}))
    keys = doc.get("verdict_keys") or []
    parts.append('<p class="note">' + where + " The verdict is ZCube's side of 1 on "
                 + H.escape(" and ".join(NAMES.get(k, k) for k in keys))
                 + " as the headline decides it (better or worse only when the 95% interval over the repetitions "
                   "excludes 1, else not resolved; with one repetition nothing is resolved, and the bracket shown is "
                   "within that run only); an alternative has the same verdict when it reached the "
                   "baseline's on each. A run that failed is shown, never dropped; sensitivity.json has TTFT P50 "
                   "and each ratio's spread over the repetitions too.</p>")
    notes = []
    if not own:
        age = age_note(made, code, count)
        if age:
            notes.append(age)
    diff = _differences(doc, config or {}) if not own else []
    if diff:
        notes.append("Its baseline experiment differs from this run's in " + ", ".join(diff[:8])
                     + (" and more" if len(diff) > 8 else "") + ".")
    parts += [f'<p class="warn">{H.escape(n)}</p>' for n in notes]
    return "".join(parts)


def none_shipped(config: dict) -> str | None:
    """The section of an experiment that declares alternatives but names no result (None: it declares none)."""
    alts = ((config or {}).get("experiment") or {}).get("sensitivity") or []
    if not alts:
        return None
    names = ", ".join(str(a.get("name")) for a in alts)
    source = shown((config or {}).get("source") or "EXPERIMENT")
    return (f'<p class="warn">No sensitivity result is shipped for this experiment: nothing here says yet whether '
            f"the verdict survives its {len(alts)} declared alternatives ({H.escape(names)}).</p>"
            f'<p class="note"><code>sudo .venv/bin/python -m testbed sensitivity {H.escape(str(source))} --reps 1'
            "</code> runs them, one repetition each, on both fabrics (the estimate is printed first); its "
            "sensitivity.json, copied beside the experiment file and "
            "named by the experiment's <code>sensitivity_result:</code> key, is shown here by every later run.</p>")


def report_section(exp: ExperimentRun) -> str | None:
    """The section for a run directory: its sensitivity.json, else (alternatives declared) 'none shipped';
    None when the experiment has neither."""
    path = Path(exp.path) / FILE
    if not path.is_file():
        return none_shipped(exp.config)
    try:
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or not isinstance(doc.get("baseline"), dict):
            raise ValueError("no baseline")
    except (OSError, ValueError) as exc:
        return f'<p class="warn">{H.escape(f"{FILE} could not be read ({exc}): no sensitivity table.")}</p>'
    return section(doc, exp.path, exp.config, (exp.versions or {}).get("git"))
