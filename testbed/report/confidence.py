"""How sure: the 95 % intervals of the headline's ZCube/ROFT ratios (docs/serving.md, "How sure").

**Between runs: the headline's interval and verdict.** Repetition k of ZCube and repetition k of ROFT share a
seed (the expert routing; the trace's requests in the same order) and run one after the other; ROFT's ECMP hash
outcome and the machine's timing are drawn anew in every run. So the unit of replication is the pair: each pair
gives one ratio r_k = ZCube_k / ROFT_k of the two repetitions' own figures (their summary.json's, as the report's
columns: ``stats.rep_metrics``), and the interval is Student's t over log r_k:
exp(mean +- t(0.975, n - 1) x sd / sqrt(n)). The ratio shown is its centre, the geometric mean of the r_k. The
spread of the r_k holds everything that moves between runs, the hash outcome and the timing as much as the
sampling noise of each run's requests and decode steps, which is what a bootstrap within runs left out (reruns
of one commit gave intervals that excluded each other). With one pair there is no between-run information:
no interval, and the verdict says the spread is unknown (``headline.SPREAD_UNKNOWN``).

Why not a hierarchical bootstrap (repetitions with replacement, then requests within them): with 3-5 pairs its
percentile interval cannot reach beyond the pairs' own [min, max] and covers a true ratio ~75 % (n = 3) to
~85 % (n = 5) of the time, not 95 %; the t interval is exact for normal log ratios and held 95 % in simulation
for the log ratio of two P99s of 120 lognormal requests. Its price is width at small n (t = 4.30 at n = 3).

**Within one run: shown beside each repetition's ratio, never deciding.** A percentile bootstrap over that pair's
measured requests (TTFT P50 and P99: nearest-rank percentiles of the requests measured in the repetition) or
measured decode steps (output tokens/s: each step with its tokens and its duration; the resampled steps' tokens
over their time, times the measured steps' time over the window, so a draw of the measured steps themselves
gives the repetition's figure and slow steps count as fewer tokens a second), with replacement, as many as it
had, in both repetitions of the pair; the 2.5th and 97.5th percentiles of ``DRAWS`` ratios. Seeded, so a report
rebuilt from the same files shows the same intervals. A nearest-rank P99 of fewer than 100 requests is the
slowest one, whose resamples can never exceed it, so such an interval is too narrow on the upper side (the
sample counts say when).
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import pandas as pd

from testbed.report import stats
from testbed.report.headline import NOT_MEASURED, NOT_RESOLVED, SPREAD_UNKNOWN, verdict
from testbed.report.load import ExperimentRun, Rep
from traffic.model import metrics

DRAWS = 2000
SEED = 20240924
LEVEL = 0.95
# headline key -> (what is resampled within a run, percentile or None for throughput, higher is better)
KEYS = {"throughput_tokens_per_s": ("steps", None, True),
        "ttft_ms.p50": ("requests", 50.0, False),
        "ttft_ms.p99": ("requests", 99.0, False)}
METHOD = ("Student's t interval over the log of the per-repetition ratios (ZCube rep k / ROFT rep k, the same "
          "seed); ratio: their geometric mean")
WITHIN_METHOD = ("percentile bootstrap within one repetition pair: its measured requests (TTFT) or decode steps "
                 "(output tokens/s) resampled with replacement")
# t(0.975, df) for df = 1 .. 30; beyond, the Cornish-Fisher expansion around the normal quantile
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
Z975 = 1.959964


def t975(df: int) -> float:
    """The 97.5th percentile of Student's t with ``df`` degrees of freedom (the two-sided 95 % quantile)."""
    if df < 1:
        raise ValueError(f"t quantile: df must be at least 1 (got {df})")
    if df <= len(T975):
        return T975[df - 1]
    z = Z975
    return (z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3))


def between_runs(ratios: list[float]) -> dict:
    """{"ratio", "ci95", "pairs", "log_sd"} of per-repetition ratios: their geometric mean and the 95 % Student t
    interval over their logs; ``ci95`` None with fewer than two (no between-run spread to judge by)."""
    logs = [math.log(r) for r in ratios if r is not None and r > 0 and math.isfinite(r)]
    n = len(logs)
    if not n:
        return {"ratio": None, "ci95": None, "pairs": 0, "log_sd": None}
    m = statistics.fmean(logs)
    if n < 2:
        return {"ratio": round(math.exp(m), 4), "ci95": None, "pairs": 1, "log_sd": None}
    sd = statistics.stdev(logs)
    half = t975(n - 1) * sd / math.sqrt(n)
    return {"ratio": round(math.exp(m), 4), "ci95": [round(math.exp(m - half), 4), round(math.exp(m + half), 4)],
            "pairs": n, "log_sd": round(sd, 6)}


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


def _point(s: dict, kind: str, pct: float | None) -> float | None:
    """A repetition's statistic from its own samples (the figure its summary holds)."""
    if not _size(s, kind):
        return None
    return float(_stat(s, np.arange(_size(s, kind))[None, :], kind, pct)[0])


def _within(z: dict, r: dict, kind: str, pct: float | None, rng: np.random.Generator) -> list[float] | None:
    """The 95 % percentile bootstrap interval of one pair's ratio, within that run (None: a side measured none)."""
    nz, nr = _size(z, kind), _size(r, kind)
    if not nz or not nr:
        return None
    zd = _stat(z, rng.integers(0, nz, size=(DRAWS, nz)), kind, pct)
    rd = _stat(r, rng.integers(0, nr, size=(DRAWS, nr)), kind, pct)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = zd / rd
    ratios = ratios[np.isfinite(ratios)]
    if not len(ratios):
        return None
    tail = (1 - LEVEL) / 2 * 100
    return [round(float(np.percentile(ratios, tail)), 4), round(float(np.percentile(ratios, 100 - tail)), 4)]


def _value(m: dict, s: dict | None, key: str) -> float | None:
    """A repetition's figure: its summary's (as the report's columns), else from its own samples."""
    v = stats.flat_get(m, key)
    if v is None and s is not None:
        kind, pct, _ = KEYS[key]
        v = _point(s, kind, pct)
    return v


def confidence(exp: ExperimentRun, per_rep: dict[str, list[dict]] | None = None) -> dict | None:
    """{"method", "level", "pairs", "between_run", "within_run", "samples", "ratios": {key: {"ratio", "ci95",
    "verdict", "pairs", "log_sd", "per_rep": [{"rep", "zcube", "roft", "ratio", "within_ci95"}]}}} for a run with
    both fabrics (None otherwise). ``per_rep``: each fabric's ``stats.rep_metrics`` of its repetitions, in order
    (computed when not given). ``samples`` (requests and decode steps measured, per repetition) and the
    within-run intervals need a live run's requests.csv and steps.csv: None without them."""
    if "zcube" not in exp.reps or "roft" not in exp.reps:
        return None
    fabrics = ("zcube", "roft")
    per_rep = per_rep or {f: [stats.rep_metrics(r) for r in exp.reps[f]] for f in fabrics}
    samples = {f: [rep_samples(r) for r in exp.reps[f]] for f in fabrics}
    have_samples = all(s is not None for ss in samples.values() for s in ss)
    by_rep = {f: {r.index: (m, s) for r, m, s in zip(exp.reps[f], per_rep[f], samples[f])} for f in fabrics}
    pairs = sorted(set(by_rep["zcube"]) & set(by_rep["roft"]))
    rng = np.random.default_rng(SEED)
    out: dict = {"method": METHOD, "level": LEVEL, "pairs": pairs, "between_run": len(pairs) >= 2,
                 "within_run": {"method": WITHIN_METHOD, "draws": DRAWS} if have_samples else None,
                 "samples": ({f: {"requests": [int(len(s["ttft_ms"])) for s in ss],
                                  "decode_steps": [int(len(s["tokens"])) for s in ss]} for f, ss in samples.items()}
                             if have_samples else None),
                 "ratios": {}}
    for key, (kind, pct, higher) in KEYS.items():
        rows, raw = [], []
        for k in pairs:
            (zm, zs), (rm, rs) = by_rep["zcube"][k], by_rep["roft"][k]
            zv, rv = _value(zm, zs, key), _value(rm, rs, key)
            ratio = zv / rv if zv is not None and rv else None
            raw.append(ratio)
            rows.append({"rep": k, "zcube": zv, "roft": rv, "ratio": None if ratio is None else round(ratio, 4),
                         "within_ci95": _within(zs, rs, kind, pct, rng) if zs is not None and rs is not None
                         else None})
        b = between_runs(raw)
        out["ratios"][key] = {"ratio": b["ratio"], "ci95": b["ci95"],
                              "verdict": verdict(b["ci95"], higher, pairs=b["pairs"]), "pairs": b["pairs"],
                              "log_sd": b["log_sd"], "per_rep": rows}
    return out


def behind(conf: dict, key: str) -> str:
    """'measured requests: ZCube 74 + 73, ROFT 70 + 75 (per repetition)...': what stands behind a headline
    figure ('' without a live run's samples)."""
    if not conf.get("samples"):
        return ""
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
                     "its within-run interval cannot reach above it")
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


__all__ = ["confidence", "between_runs", "t975", "verdict", "behind", "rep_samples", "window", "requests_to_bound_p99",
           "KEYS", "NOT_RESOLVED", "SPREAD_UNKNOWN", "NOT_MEASURED", "DRAWS"]
