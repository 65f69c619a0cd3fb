"""The seed's scale computed by the run itself: when an experiment names a shipped scale result
(``scale_result:``, n = 512 on the flow-level engine), ``run`` runs that result's experiment again, live, on the
fluid backend (its size, sessions in flight, duration and warm-up, at least ``LIVE_REPETITIONS`` repetitions a
fabric) after its own repetitions, when the estimate fits what is left of the main job's budget
(``BUDGET_S``), and shows that instead of the shipped file; otherwise the shipped file, and the line says why.

``scale_live`` (experiment key): ``auto`` as above for the main job (the experiment as written, no workload key
overridden, on the emulated backend), ``always`` (whatever the run and the budget), ``never`` (the shipped
file). The live run is a complete run directory of its own, ``<run dir>/scale/``; ``scale_result.json`` in the
run directory says which it is (``shown``: live or shipped, ``why``), the shipped document kept as ``shipped``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from common.paths import shown
from testbed.experiment.schema import Override, Resolved

BUDGET_S = 15 * 60  # the main job's promise (README: both fabrics served in about a quarter of an hour)
LIVE_REPETITIONS = 5  # issue 39: the live figure over at least five repetitions (ECMP outcomes) a fabric
BACKEND = "fluid"  # the engine that computes n = 512 in minutes (docs/fluid.md)
FOLDER = "scale"


def live_overrides(resolved: Resolved, doc: dict) -> list[Override]:
    """The run's own overrides, then the shipped result's experiment: its size, load, duration and warm-up, on
    the fluid backend, at least ``LIVE_REPETITIONS`` repetitions; nothing of the main job's pictures or checks."""
    why = "scale_live"
    keys = {"backend": BACKEND, "gpus": doc["gpus"], "gpus_per_switch": "auto",
            "serving.concurrency": doc["concurrency"], "trace.duration_s": doc["duration_s"],
            "serving.warmup_s": doc["warmup_s"], "repetitions": LIVE_REPETITIONS,
            "scale_result": None, "crosscheck_result": None, "sensitivity_result": None, "scale_live": "never",
            "hosts": None, "paths_from": None, "jobs": "auto"}  # one machine, the engine's own paths
    if doc.get("represents") is not None:
        keys["link.represents"] = doc["represents"]
    return list(resolved.overrides) + [Override(k, v, why) for k, v in keys.items()]


def why_shipped(mode: str, main_job: bool, need_s: float | None = None, left_s: float | None = None,
                minutes: Callable[[float], str] = str) -> str | None:
    """Why the shipped result is shown rather than a live one (None: compute it live). ``main_job``: the run is
    the experiment as written on the emulated backend; ``auto`` computes it for that run only (a variant's
    overrides are not the shipped result's workload, and a quick look on a simulator wants no minutes added),
    and only when the live run's estimate ``need_s`` fits the ``left_s`` of the budget (when they are given)."""
    if mode == "never":
        return "scale_live: never"
    if mode == "auto" and not main_job:
        return "scale_live auto computes it after the experiment as written on the emulated backend only"
    if mode == "auto" and need_s is not None and need_s > left_s:
        return (f"not computed live: it needs ~{minutes(need_s)}, {minutes(max(left_s, 0))} of the main job's "
                f"{BUDGET_S // 60} min left (scale_live: always computes it)")
    return None


def write_shipped(path: Path, shipped: dict, why: str) -> None:
    path.write_text(json.dumps(shipped | {"shown": "shipped", "why": why}, indent=1) + "\n")


def write_live(path: Path, live_dir: Path, shipped: dict, mode: str, took: str) -> None:
    """The live run's document (``testbed.report.scale_result.extract``), the shipped one kept inside it and its
    twin check carried over."""
    from testbed.report import scale_result

    doc = scale_result.extract(live_dir, how=f"live, by this run (scale_live: {mode}): {shown(live_dir)}",
                               check=shipped.get("check"))
    path.write_text(json.dumps(doc | {"shown": "live", "why": f"computed by this run in {took}", "shipped": shipped},
                               indent=1) + "\n")


__all__ = ["live_overrides", "why_shipped", "write_shipped", "write_live", "BUDGET_S", "LIVE_REPETITIONS", "FOLDER"]
