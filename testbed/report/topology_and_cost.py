"""Topology pictures and the capex table for the report.

Both come from the experiment's plan/ folder when the ``run`` command wrote
it, otherwise from the fabric model with the parameters the replay recorded
(runs/<fabric>/rep1/config.json["fabric"]): the report must not depend on
which optional files a run left behind.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import matplotlib

from common.errors import TestbedError
from testbed.report.load import ExperimentRun, read_json


def fabric_params(exp: ExperimentRun, fabric: str) -> dict:
    """build_fabric kwargs of ``fabric`` (from its first repetition, or the defaults at the other's n)."""
    if fabric in exp.reps:
        params = dict(exp.reps[fabric][0].config.get("fabric") or {})
        params.setdefault("kind", fabric)
        return params
    n = next((r[0].config.get("fabric", {}).get("gpus") for r in exp.reps.values() if r[0].config.get("fabric")), 32)
    return {"kind": fabric, "gpus": n}


def _build(params: dict):
    """The fabric model of ``params``, built once per report process: the topology pictures, the capex and the
    breakdown's paths each ask for it (an n=16,384 ZCube takes ~20 s to build, five times was most of a report)."""
    key = tuple(sorted(params.items()))
    try:
        hash(key)
    except TypeError:  # a value the cache cannot key (a list): built each time, build_fabric says what is wrong
        return _built.__wrapped__(key)
    return _built(key)


@functools.lru_cache(maxsize=4)
def _built(params: tuple):
    from fabrics import build_fabric

    return build_fabric(**dict(params))


def topology_pictures(exp: ExperimentRun, figures: Path) -> tuple[dict[str, Path], list[str]]:
    """fabric -> figures/topology_<fabric>.png (copied from plan/ or drawn); plus notes."""
    from fabrics.draw import PLAN_DRAWN_GPUS, draw

    out, notes = {}, []
    for fabric in exp.fabrics:
        target = figures / f"topology_{fabric}.png"
        given = exp.path / "plan" / f"{fabric}.png"
        if given.is_file():
            shutil.copyfile(given, target)
            out[fabric] = target
            continue
        try:
            f = _build(fabric_params(exp, fabric))
            if f.n_gpus > PLAN_DRAWN_GPUS:  # the plan's rule (testbed.experiment.rundir.write_plan)
                notes.append(f"no topology picture for {fabric}: {f.n_gpus} GPUs, more than {PLAN_DRAWN_GPUS}")
                continue
            with matplotlib.rc_context({"savefig.bbox": "tight"}):  # draw()'s title can be wider than its figure
                draw(f, target)
            out[fabric] = target
        except (TestbedError, TypeError, ValueError) as exc:
            notes.append(f"no topology picture for {fabric}: {exc}")
    return out, notes


def _cost_from_file(doc) -> dict | None:
    """Accept {"fabrics": {"zcube": {...}, "roft": {...}}, "ratios_zcube_over_roft": {...}} (what ``run``
    writes) or the same without the "fabrics" level, with "ratios" or "ratio"; ratios computed if absent."""
    if not isinstance(doc, dict):
        return None
    fabrics = doc.get("fabrics") if isinstance(doc.get("fabrics"), dict) else doc.get("cost", doc)
    if not (isinstance(fabrics, dict) and isinstance(fabrics.get("zcube"), dict)
            and isinstance(fabrics.get("roft"), dict)):
        return None
    z, r = fabrics["zcube"], fabrics["roft"]
    rat = doc.get("ratios_zcube_over_roft") or doc.get("ratios") or doc.get("ratio")
    if not isinstance(rat, dict):
        rat = {k: round(z[k] / r[k], 4) for k in z if isinstance(z[k], (int, float)) and r.get(k)}
    return {"zcube": z, "roft": r, "ratios": rat}


def cost(exp: ExperimentRun) -> dict:
    """Capex of both fabrics at this run's scale: plan/cost.json, else the cost model."""
    from fabrics.cost import cost_of, ratios

    path = exp.path / "plan" / "cost.json"
    doc = _cost_from_file(read_json(path, "the capex of both fabrics", required=False))
    if doc is not None:
        return {**doc, "source": "plan/cost.json", "gpus": fabric_params(exp, "zcube").get("gpus")}
    try:
        z = cost_of(_build(fabric_params(exp, "zcube")))
        r = cost_of(_build(fabric_params(exp, "roft")))
    except (TestbedError, TypeError, ValueError) as exc:
        return {"source": f"unavailable ({exc})"}
    return {"zcube": z.as_dict(), "roft": r.as_dict(), "ratios": ratios(z, r),
            "gpus": fabric_params(exp, "zcube").get("gpus"),
            "source": "fabrics.cost model" + (" (plan/cost.json unreadable)" if path.exists() else "")}
