"""What defines a workload: the one list of experiment keys that do not, and the one comparison of two experiments.

Every question "is this the same workload?" asks it here: whether a calibration applies to a run
(``testbed.report.serving``), whether a shipped sensitivity's baseline is this run's experiment
(``testbed.report.sensitivity_section``), where the runs of ``testbed compare`` differ
(``testbed.report.comparison``) and whether ``testbed crosscheck --against`` was given a run of the same
experiment (``testbed.experiment.crosscheck``). They read experiment.json's ``experiment`` (the resolved
experiment, ``testbed.experiment.schema.Experiment`` dumped as JSON), so this module sits in the report, which
reads saved files only; the schema's top-level keys are checked against the list by a unit test.

Two experiments are the same workload when they differ only in keys of ``NOT_WORKLOAD_KEYS`` (and in the keys
a caller sets aside on purpose, e.g. a calibration's knob). Values compare as saved, with two rules: a file
(a key ending in ``path``) by its name, since the same trace in another clone is the same trace; and a key
only one side has is the same when the other's value is empty (null, [] or {}), a key the schema gained
after the older file was written, left at its default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

FORMAT_NAMES = {"mooncake": "Mooncake", "azure": "Azure"}


def served_text(served: dict) -> str:
    """What a run served, from experiment.json's ``served`` (``testbed.repetition.spec.served_source``), as the
    terminal's first line and the report say it: 'MY_TRACE.jsonl, 3,993 requests, Mooncake format, with
    hash_ids' or 'agentic-coding, generated, seed 0 (10,000 requests drawn)'."""
    n = f"{served['requests']:,} requests"
    if served["source"] == "generated":
        return f"{served['workload']}, generated, seed {served['seed']} ({n} drawn)"
    name = Path(served["path"]).name
    what = f"{served['workload']} ({name})" if served["source"] == "workload" else name
    keys = ("with hash_ids" if served["with_hash_ids"] == served["requests"] else
            f"{served['with_hash_ids']:,} with hash_ids" if served["with_hash_ids"] else "no hash_ids")
    skipped = f", {served['skipped_rows']:,} bad rows skipped" if served["skipped_rows"] else ""
    return f"{what}, {n}, {FORMAT_NAMES.get(served['format'], served['format'])} format, {keys}{skipped}"


def served_of(config: dict) -> str:
    """What the run of experiment.json ``config`` served: its ``served`` record, or in a run from before it the
    workload's or the trace file's name."""
    if isinstance((config or {}).get("served"), dict):
        return served_text(config["served"])
    t = ((config or {}).get("experiment") or {}).get("trace") or {}
    return t.get("workload") or Path(t.get("path") or "the trace").name


# Top-level experiment keys that say how, where, how often or under which name a workload runs, or what the
# report shows beside it: never what the cluster serves or what the network carries.
NOT_WORKLOAD_KEYS = (
    "name",  # the run id's suffix
    "fabrics",  # which fabrics run it (the comparison, not the workload)
    "backend",  # what carries the messages: emulated, ideal or ns3
    "hosts",  # the machines the emulated fabric is spread over
    "repetitions",  # how often
    "jobs",  # how many repetitions are carried at once (simulated backends)
    "seed",  # the first repetition's seed (repetition r uses seed + r - 1)
    "hash_seed",  # the ECMP outcome's seed (a draw, as the seed)
    "paths_from",  # an emulator run whose recorded ECMP outcome a simulator follows (the draw, taken from there)
    "twin",  # the ns-3 twin's model assumptions (how one engine models the network, as backend)
    "calibration",  # files the report shows beside the run
    "load_curve",
    "sensitivity_result",
    "scale_result",
    "scale_live",  # whether the run computes the scale result again (what the report shows beside it)
    "crosscheck_result",
    "sensitivity",  # what `testbed sensitivity` and `testbed sweep` run besides; `run` ignores them
    "sweep",
    "sweep_paired",
)

_EMPTY = (None, [], {})


def is_workload_key(key: str) -> bool:
    """Whether a key path (``serving.concurrency``, ``seed``) is part of what defines a workload."""
    return key.split(".")[0] not in NOT_WORKLOAD_KEYS


def flat(experiment: dict | None) -> dict[str, Any]:
    """Key path -> value of an experiment mapping (nested mappings flattened, lists kept whole), a file by its
    name."""
    out: dict[str, Any] = {}
    for k, v in (experiment or {}).items():
        if isinstance(v, dict) and v:
            out |= {f"{k}.{sub}": w for sub, w in flat(v).items()}
        else:
            out[k] = Path(v).name if k.endswith("path") and isinstance(v, str) else v
    return out


def same_value(a, b) -> bool:
    """Whether two values of one key path are the same (absent and empty are: ``None`` stands for absent)."""
    return a == b or (a in _EMPTY and b in _EMPTY)


def differences(a: dict | None, b: dict | None, aside: Iterable[str] = ()) -> list[str]:
    """The key paths, sorted, in which two experiments' workloads differ: ``NOT_WORKLOAD_KEYS`` and the key
    paths in ``aside`` (with everything under them) left out."""
    aside = tuple(aside)
    fa, fb = flat(a), flat(b)
    return sorted(k for k in fa.keys() | fb.keys()
                  if is_workload_key(k) and not any(k == s or k.startswith(s + ".") for s in aside)
                  and not same_value(fa.get(k), fb.get(k)))


__all__ = ["NOT_WORKLOAD_KEYS", "is_workload_key", "flat", "same_value", "differences"]
