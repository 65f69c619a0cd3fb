"""How sure: 95 % confidence intervals of the live headline's ZCube/ROFT ratios, and what stands behind them.

Method (docs/serving.md, "How sure"): a stratified percentile bootstrap. The headline's figure of a fabric
is the median over its repetitions of each repetition's statistic (TTFT P50 and P99: nearest-rank
percentiles of the requests measured in that repetition; output tokens/s: the tokens of the decode
steps that ended in the measured window over the window). One bootstrap draw resamples, within every
repetition of both fabrics, its measured requests (or its measured decode steps, each with its tokens and
its duration) with replacement, as many as it had; recomputes each repetition's statistic (throughput:
the resampled steps' tokens over their time, times the measured steps' time over the window, so a draw of
the measured steps themselves gives the headline's figure and slow steps count as fewer tokens a second);
combines them across repetitions by the median, as the headline does; and takes ZCube's over ROFT's.
The 2.5th and 97.5th percentiles of ``DRAWS`` such ratios are the interval. Seeded, so a report rebuilt
from the same files shows the same interval.

What it does not cover: the repetitions themselves are held fixed (their spread is shown beside it,
[min, max]); and a nearest-rank P99 of fewer than 100 requests is the largest one, whose resamples can
never exceed it, so such an interval is too narrow on the upper side (the sample counts say when).
A ratio is called better or worse only when its interval excludes 1.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from testbed.report.load import ExperimentRun, Rep
from traffic.model import metrics

DRAWS = 2000
SEED = 20240924
LEVEL = 0.95
# headline key -> (what is resampled, percentile or None for throughput, higher is better)
KEYS = {"throughput_tokens_per_s": ("steps", None, True),
        "ttft_ms.p50": ("requests", 50.0, False),
        "ttft_ms.p99": ("requests", 99.0, False)}
NOT_RESOLVED = "not resolved at this sample size"


def _read(path) -> pd.DataFrame | None:
    try:
        return pd.read_csv(path)
    except (OSError, ValueError):
        return None


def window(rep: Rep) -> tuple[float, float]:
    """The measured window [warmup, end) of a live repetition, in cluster seconds."""
    cfg = rep.config.get("replay") or {}
    lo = float(cfg.get("warmup_s") or 0.0)
    dur = float(cfg.get("duration_s") or 0.0)
    end = dur if cfg.get("arrivals") == "closed" else dur / float(cfg.get("speed") or 1.0)
    return lo, end


def rep_samples(rep: Rep) -> dict | None:
    """{"ttft_ms": measured requests' TTFT, "tokens": tokens of each measured decode step, "window_s"} of a
    live repetition (the requests and steps its summary's figures count), None when it has no such files."""
    if rep.summary.get("driver") != "live":
        return None
    req, steps = _read(rep.path / "requests.csv"), _read(rep.path / "steps.csv")
    if req is None or steps is None:
        return None
    lo, end = window(rep)
    ok = req[(req["arrival_s"] >= lo) & (req["arrival_s"] < end) & req["ttft_s"].notna()
             & (req["first_token_s"] <= end)]
    dec = steps[steps["engine"].astype(str).str.startswith("decode") & steps["end_s"].notna()
                & (steps["end_s"] >= lo) & (steps["end_s"] <= end)]
    return {"ttft_ms": ok["ttft_s"].to_numpy(dtype=float) * 1e3, "tokens": dec["requests"].to_numpy(dtype=float),
            "step_s": (dec["end_s"] - dec["start_s"]).to_numpy(dtype=float), "window_s": end - lo}


def _stat(s: dict, idx: np.ndarray, kind: str, pct: float | None) -> np.ndarray:
    """A repetition's statistic for each row of ``idx`` (draws x samples, indices into its samples)."""
    if kind == "steps":
        tokens, step_s = s["tokens"][idx], s["step_s"][idx]
        busy = s["step_s"].sum()
        with np.errstate(divide="ignore", invalid="ignore"):
            return tokens.sum(axis=-1) / step_s.sum(axis=-1) * busy / s["window_s"]
    return np.sort(s["ttft_ms"][idx], axis=-1)[..., metrics.nearest_rank_index(idx.shape[-1], pct)]


def _size(s: dict, kind: str) -> int:
    return len(s["tokens"] if kind == "steps" else s["ttft_ms"])


def _draws(samples: list[dict], kind: str, pct: float | None, rng: np.random.Generator) -> np.ndarray | None:
    """DRAWS bootstrap values of a fabric's headline figure (median over repetitions)."""
    if any(not _size(s, kind) for s in samples):
        return None
    per_rep = [_stat(s, rng.integers(0, _size(s, kind), size=(DRAWS, _size(s, kind))), kind, pct) for s in samples]
    return np.median(np.stack(per_rep), axis=0)


def _point(samples: list[dict], kind: str, pct: float | None) -> float | None:
    """The headline's figure from the same samples: the median over repetitions of each one's statistic."""
    if not samples or any(not _size(s, kind) for s in samples):
        return None
    return float(np.median([_stat(s, np.arange(_size(s, kind))[None, :], kind, pct)[0] for s in samples]))


def verdict(ci: list[float] | None, higher_is_better: bool) -> str:
    """'better' / 'worse' (ZCube's side of 1) when the interval excludes 1, else not resolved."""
    if not ci or ci[0] is None or ci[1] is None:
        return NOT_RESOLVED
    if ci[0] > 1:
        return "better" if higher_is_better else "worse"
    if ci[1] < 1:
        return "worse" if higher_is_better else "better"
    return NOT_RESOLVED


def confidence(exp: ExperimentRun) -> dict | None:
    """{"method", "draws", "samples": {fabric: {"requests": [per rep], "decode_steps": [per rep]}},
    "ratios": {key: {"ratio", "ci95", "verdict"}}} for a live run with both fabrics, else None."""
    if "zcube" not in exp.reps or "roft" not in exp.reps:
        return None
    samples = {f: [rep_samples(r) for r in exp.reps[f]] for f in ("zcube", "roft")}
    if any(s is None for ss in samples.values() for s in ss):
        return None
    rng = np.random.default_rng(SEED)
    out: dict = {"method": "stratified percentile bootstrap over requests (TTFT) and decode steps (throughput) "
                           "within each repetition, combined across repetitions by the median",
                 "draws": DRAWS, "level": LEVEL,
                 "samples": {f: {"requests": [int(len(s["ttft_ms"])) for s in ss],
                                 "decode_steps": [int(len(s["tokens"])) for s in ss]} for f, ss in samples.items()},
                 "ratios": {}}
    for key, (kind, pct, higher) in KEYS.items():
        z, r = (_draws(samples[f], kind, pct, rng) for f in ("zcube", "roft"))
        pz, pr = _point(samples["zcube"], kind, pct), _point(samples["roft"], kind, pct)
        if z is None or r is None or not pr:
            out["ratios"][key] = {"ratio": None, "ci95": None, "verdict": NOT_RESOLVED}
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = z / r
        ratios = ratios[np.isfinite(ratios)]
        tail = (1 - LEVEL) / 2 * 100
        ci = [round(float(np.percentile(ratios, tail)), 4), round(float(np.percentile(ratios, 100 - tail)), 4)]
        out["ratios"][key] = {"ratio": round(pz / pr, 4), "ci95": ci, "verdict": verdict(ci, higher)}
    return out


def behind(conf: dict, key: str) -> str:
    """'74 + 73 requests a fabric (ZCube), 70 + 75 (ROFT)': what stands behind a headline figure."""
    kind = KEYS[key][0]
    what = "requests" if kind == "requests" else "decode_steps"
    parts = []
    for f, label in (("zcube", "ZCube"), ("roft", "ROFT")):
        counts = conf["samples"][f][what]
        parts.append(f"{label} {' + '.join(str(c) for c in counts)}")
    noun = "measured requests" if kind == "requests" else "measured decode steps"
    text = f"{noun}: {', '.join(parts)} (per repetition)"
    pct = KEYS[key][1]
    if pct is not None:
        smallest = min(c for f in ("zcube", "roft") for c in conf["samples"][f][what])
        rank = metrics.nearest_rank_index(smallest, pct) + 1 if smallest else 0
        if smallest and rank == smallest:
            text += (f"; the P{pct:g} of {smallest} requests is the slowest one (rank {rank} of {smallest}), so "
                     "its interval cannot reach above it")
        elif smallest:
            text += f"; the P{pct:g} is the {smallest - rank + 1}{_ordinal(smallest - rank + 1)} slowest"
    return text


def _ordinal(k: int) -> str:
    return "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")


def requests_to_bound_p99(pct: float = 99.0, z: float = 1.96) -> int:
    """The fewest requests whose distribution-free ~95 % interval of the nearest-rank percentile has an
    upper end inside the sample (binomial order statistics, as ``stats.quantile_ci``)."""
    n = 1
    q = pct / 100
    while math.ceil(n * q + z * math.sqrt(n * q * (1 - q))) + 1 > n:
        n += 1
    return n


__all__ = ["confidence", "verdict", "behind", "rep_samples", "window", "requests_to_bound_p99", "KEYS",
           "NOT_RESOLVED", "DRAWS"]
