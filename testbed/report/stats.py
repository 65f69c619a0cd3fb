"""Headline numbers, recomputed from each repetition's raw files.

Why recompute instead of copying the replay summary: the report must be
checkable against the data it plots (a test recomputes FCT percentiles from
transfers.csv), and a disagreement between summary.json and transfers.csv is
itself worth reporting. The formulas are the replay's own (``testbed.repetition.drivers.plan.
summarize``): nearest-rank percentiles over verified rows, goodput = verified
bytes over first start .. last end. What needs the trace schedule (the TTFT
proxy) or the switch counters (PFC pauses, queue drops, CPU) comes from summary.json, each count under
its one key (``testbed.report.headline.pfc_pauses``, ``queue_drops``). Over repetitions a figure is the
median, with [min, max].
"""

from __future__ import annotations

import math
import statistics

from testbed.report import headline
from testbed.report.fmt import flat_get
from testbed.report.load import ExperimentRun, Rep
from traffic.model import metrics
from traffic.model.prefix_cache import hit_ratios

# flattened keys of the headline, in display order
KEYS = ("goodput_bps", "goodput_real_equivalent_bps", "fct_ms.p50", "fct_ms.p99", "fct_ms.p999",
        "ttft_ms.p50", "ttft_ms.p99", "start_lateness_ms.p50", "start_lateness_ms.p99", "requests_per_s",
        "pfc_pauses", "queue_drops", "transfers", "verified", "failed", "max_link_utilization", "nic_imbalance",
        "throughput_tokens_per_s", "decode_step_ms.p50", "decode_step_ms.p99", "ep_exchange_ms.p50",
        "ep_exchange_ms.p99", "ep_messages", "ep_messages_verified")
RATIO_KEYS = ("goodput_bps", "fct_ms.p50", "fct_ms.p99", "fct_ms.p999", "ttft_ms.p50", "ttft_ms.p99",
              "requests_per_s", "throughput_tokens_per_s", "ep_exchange_ms.p99")
LATENESS_GOAL_MS = 5.0
# 1 Hz queue samples bracket the run loosely, so a saturated link can read a
# little over 1; above this it is a shaping problem, not a sampling one.
UTILIZATION_LIMIT = 1.02


def quantile_ci(values, p: float, z: float = 1.96) -> list[float | None] | None:
    """Distribution-free ~95% interval of the nearest-rank p-th percentile (binomial order
    statistics). An end that falls outside the sample is None (open): with ~1000 samples the
    P99.9 is the maximum, and nothing bounds the true P99.9 from above."""
    arr = sorted(values)
    n = len(arr)
    if not n:
        return None
    q = p / 100
    half = z * math.sqrt(n * q * (1 - q))
    lo, hi = math.floor(n * q - half), math.ceil(n * q + half) + 1
    return [arr[lo - 1] if lo >= 1 else None, arr[hi - 1] if hi <= n else None]


def fct_ci_ms(reps: list[Rep]) -> dict:
    """95% intervals of the FCT percentiles over every repetition's verified transfers, in ms."""
    fct = []
    for r in reps:
        t = r.transfers
        if t is not None:
            ok = t[t["verified"] & t["start"].notna() & t["end"].notna()]
            fct += ((ok["end"] - ok["start"]) * 1e3).tolist()
    out = {}
    for key, p in (("fct_ms.p50", 50), ("fct_ms.p99", 99), ("fct_ms.p999", 99.9)):
        ci = quantile_ci(fct, p)
        if ci:
            out[key] = [None if v is None else round(v, 3) for v in ci]
    return out


def _flat_set(doc: dict, key: str, value) -> None:
    *parents, last = key.split(".")
    for part in parents:
        doc = doc.setdefault(part, {})
    doc[last] = value


def pfc_enabled(rep: Rep) -> bool:
    pfc = rep.summary.get("pfc")
    return rep.pfc_events is not None or rep.pfc_ports is not None or bool(isinstance(pfc, dict) and pfc.get("enabled"))


def pfc_pauses(rep: Rep) -> int:
    """The repetition's PFC pauses as its summary.json records them (``headline.pfc_pauses``); 0 when none is
    recorded (PFC off, or a replay from before the PFC datapath)."""
    v = headline.pfc_pauses(rep.summary)
    return int(v) if v is not None else 0


def gpus_per_server(rep: Rep) -> int:
    fab = rep.config.get("fabric", {}) if isinstance(rep.config, dict) else {}
    return int(fab.get("gpus_per_server") or 8)


def nic_loads(rep: Rep) -> dict[tuple[int, int], int] | None:
    """(gpu, NIC port) -> sent + received bytes, every port of every GPU (0 when idle)."""
    if rep.nics is None:
        return None
    n = int((rep.config.get("fabric") or {}).get("gpus") or 0)
    gpus = [int(str(g).removeprefix("gpu")) for g in rep.nics["gpu"]]
    loads = {(g, p): 0 for g in range(1, max([n, *gpus]) + 1) for p in (1, 2)}
    for g, p, tx, rx in zip(gpus, rep.nics["port"], rep.nics["sent_bytes"], rep.nics["received_bytes"]):
        loads[(g, int(p))] = loads.get((g, int(p)), 0) + int(tx) + int(rx)
    return loads


def nic_imbalance(rep: Rep) -> dict | None:
    """Per server: max / mean load over its NIC ports (1 = perfectly even)."""
    loads = nic_loads(rep)
    if not loads:
        return None
    k = gpus_per_server(rep)
    servers: dict[int, list[int]] = {}
    for (g, _p), b in sorted(loads.items()):
        servers.setdefault((g - 1) // k + 1, []).append(b)
    ratios = {s: round(max(v) / (sum(v) / len(v)), 3) for s, v in servers.items() if sum(v) > 0}
    if not ratios:
        return None
    worst = max(ratios, key=ratios.get)
    return {"per_server": ratios, "max": ratios[worst], "worst_server": worst,
            "median": round(statistics.median(ratios.values()), 3)}


def rep_metrics(rep: Rep) -> dict:
    """One repetition's headline, nested like the replay summary."""
    s = rep.summary
    out: dict = {}
    t = rep.transfers
    if t is not None:
        ok = t[t["verified"] & t["start"].notna() & t["end"].notna()]
        fct = (ok["end"] - ok["start"]).tolist()
        started = t[t["start"].notna() & t["scheduled_start"].notna()]
        lateness = (started["start"] - started["scheduled_start"]).tolist()
        first, last = (ok["start"].min(), ok["end"].max()) if len(ok) else (0.0, 0.0)
        span = last - first
        goodput = float(ok["bytes"].sum()) * 8 / span if span > 0 else 0.0
        scale = s.get("bytes_scale") or _bytes_scale(rep)
        out |= {
            "transfers": int(len(t)), "verified": int(len(ok)), "failed": int(len(t) - len(ok)),
            "bytes": int(ok["bytes"].sum()),
            "goodput_bps": round(goodput),
            "goodput_real_equivalent_bps": round(goodput * scale) if scale else None,
            "fct_ms": metrics.rounded_percentiles(fct, ("p50", "p99", "p999"), factor=1e3),
            "start_lateness_ms": metrics.rounded_percentiles(lateness, ("p50", "p99"), factor=1e3),
            "requests_per_s": round(ok["request_id"].nunique() / span, 3) if span > 0 else 0.0,
        }
    else:  # no raw rows: fall back to the replay's own numbers
        for key in ("transfers", "verified", "failed", "bytes", "goodput_bps", "goodput_real_equivalent_bps",
                    "fct_ms", "start_lateness_ms", "requests_per_s"):
            out[key] = s.get(key)
    out["ttft_ms"] = {k: flat_get(s, f"ttft_ms.{k}") for k in ("p50", "p99")}
    if s.get("driver") == "live":  # the serving figures; lateness over KV and EP, in real-cluster time
        out["start_lateness_ms"] = s.get("start_lateness_ms")
        for key in ("throughput_tokens_per_s", "decode_step_ms", "ep_exchange_ms", "ep_messages",
                    "ep_messages_verified", "ttft_breakdown_ms", "prefix_cache"):
            out[key] = s.get(key)
        out["requests_per_s"] = s.get("completed_requests_per_s")  # requests served, not KV transfers seen
    out["queue_drops"] = headline.queue_drops(s)
    out["pfc_enabled"] = pfc_enabled(rep)
    out["pfc_pauses"] = pfc_pauses(rep)
    if rep.links is not None and not rep.links.empty:
        i = rep.links["utilization"].idxmax()
        out["max_link_utilization"] = round(float(rep.links.loc[i, "utilization"]), 4)
        out["hottest_queue"] = str(rep.links.loc[i, "queue"])
    else:
        out["max_link_utilization"] = s.get("max_link_utilization")
        out["hottest_queue"] = s.get("hottest_queue")
    imb = nic_imbalance(rep)
    out["nic_imbalance"] = imb["max"] if imb else None
    out["congestion"] = s.get("congestion")  # by port class (testbed.repetition.congestion)
    return out


def _bytes_scale(rep: Rep) -> float | None:
    rate = (rep.config.get("datapath") or {}).get("rate_bps") or rep.summary.get("rate_bps")
    if not rate:
        return None
    from common import scale

    return scale.bytes_scale(rate)


def _median(values: list):
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    m = statistics.median(vals)
    return int(m) if isinstance(m, float) and m.is_integer() and all(isinstance(v, int) for v in vals) else m


def consistency_notes(rep: Rep, m: dict) -> list[str]:
    """Where the raw files disagree with the replay's summary.json."""
    notes = []
    for key in ("transfers", "verified", "fct_ms.p99", "goodput_bps"):
        mine, theirs = flat_get(m, key), flat_get(rep.summary, key)
        if mine is not None and theirs is not None and abs(mine - theirs) > 1e-6 * max(1, abs(theirs)) + 1e-3:
            notes.append(f"{rep.label}: {key} is {mine} from the raw files but {theirs} in summary.json")
    return notes


def fidelity_problems(rep: Rep, m: dict) -> list[str]:
    """Why this repetition's numbers may not be the fabric's (empty when fine)."""
    s, out = rep.summary, []
    for w in s.get("warnings") or []:
        if "fell behind" in str(w):
            out.append(f"{rep.label}: {w}")
    if s.get("crashed_agents"):
        out.append(f"{rep.label}: agents exited early: {s['crashed_agents']}")
    if m.get("failed"):
        out.append(f"{rep.label}: {m['failed']} of {m['transfers']} transfers failed")
    if m.get("ep_messages") and m.get("ep_messages_verified") != m.get("ep_messages"):
        out.append(f"{rep.label}: {m['ep_messages'] - (m.get('ep_messages_verified') or 0)} of {m['ep_messages']} "
                   "expert-parallel messages were not verified")
    cpu = s.get("cpu")
    if isinstance(cpu, dict) and cpu.get("saturated"):
        out.append(f"{rep.label}: CPU saturated (ovs-vswitchd {cpu.get('ovs_vswitchd_cores')} cores, machine "
                   f"{_percent(cpu.get('machine_busy_fraction'))} busy)")
    pfc = s.get("pfc")
    if isinstance(pfc, dict) and pfc.get("lossless_ok") is False:
        out.append(f"{rep.label}: PFC was on but the fabric was not lossless (lossless_ok false, "
                   f"{m.get('queue_drops')} queue drops)")
    u = m.get("max_link_utilization")
    if u is not None and u > UTILIZATION_LIMIT:
        out.append(f"{rep.label}: link {m.get('hottest_queue')} carried {u:.2f}x its configured rate")
    out += invariant_problems(rep)
    return out


def invariants_of(rep: Rep) -> dict:
    """{"rep", "ok", "violations", "checked"}: the replay's measurement invariants (summary.json
    "invariants", testbed.repetition.invariants). A run from before them gets the one check its files allow,
    negative bytes in links.csv (ok None when that finds nothing)."""
    inv = rep.summary.get("invariants")
    if isinstance(inv, dict):
        found = list(inv.get("violations") or [])
        if inv.get("ok") is False and not found:
            found = ["the invariants failed but recorded no violation"]
        return {"rep": rep.index, "ok": inv.get("ok"), "violations": found, "checked": list(inv.get("checked") or [])}
    found = []
    links = rep.links
    if links is not None and "bytes" in links:
        neg = links[links["bytes"] < 0]
        if not neg.empty:
            q = neg.iloc[0]
            found.append(f"links.csv has {len(neg)} queues with negative bytes (e.g. {q['queue']} -> {q['towards']}: "
                         f"{int(q['bytes'])} B, utilization {q['utilization']:.4f})")
    return {"rep": rep.index, "ok": False if found else None, "violations": found, "checked": ["links_csv_signs"]}


def invariant_problems(rep: Rep) -> list[str]:
    """One fidelity problem per violated measurement invariant."""
    inv = invariants_of(rep)
    if inv["ok"] is not False:
        return []
    return [f"{rep.label}: measurement invariant violated: {v}" for v in inv["violations"]]


def _percent(v) -> str:
    return f"{v * 100:.0f}%" if isinstance(v, (int, float)) else "?"


def overload_warning(rep: Rep) -> str | None:
    """The replay's "the cluster is overloaded; TTFT measures the queue (...)" warning, or None."""
    from traffic.model.schedule import OVERLOAD_MESSAGE

    for w in rep.summary.get("warnings") or []:
        if str(w).strip().lower().startswith(OVERLOAD_MESSAGE.lower()):
            return str(w)
    return None


def _index_key(key: str) -> tuple:
    """"2" before "10"."""
    return (0, int(key)) if str(key).isdigit() else (1, str(key))


def _per_instance(rep: Rep, kind: str, column: str) -> dict[str, float]:
    """{instance index as text: value} of one kind from instances.csv (empty without it)."""
    df = rep.instances
    if df is None or column not in df.columns:
        return {}
    rows = df[df["kind"] == kind].sort_values("instance", kind="stable")
    return {str(int(i)): round(float(v), 4) for i, v in zip(rows["instance"], rows[column]) if v == v}


def _utilization(rep: Rep, kind: str) -> dict[str, float]:
    """summary.json's ``<kind>_utilization`` (the replay's own), else instances.csv."""
    got = rep.summary.get(f"{kind}_utilization")
    if isinstance(got, dict) and got:
        out = {}
        for k, v in got.items():
            try:
                out[str(k)] = round(float(v), 4)
            except (TypeError, ValueError):
                continue
        if out:
            return dict(sorted(out.items(), key=lambda kv: _index_key(kv[0])))
    return _per_instance(rep, kind, "utilization")


def rep_operating_point(rep: Rep) -> dict:
    """One replay's serving operating point: per-instance utilization (and prefill offered load,
    rho: over 1 the instance cannot keep up), whether the replay flagged the cluster overloaded
    (its summary's warning, ``traffic.model.schedule.overloaded``) and where the figures came from.
    ``overloaded`` is None when the replay recorded no operating point at all (an older run)."""
    warning = overload_warning(rep)
    prefill = _utilization(rep, "prefill")
    recorded = bool(prefill) or rep.instances is not None or rep.serving_queue is not None
    source = ("summary.json" if isinstance(rep.summary.get("prefill_utilization"), dict) and
              rep.summary.get("prefill_utilization") else "instances.csv" if rep.instances is not None else None)
    return {"prefill_utilization": prefill, "decode_utilization": _utilization(rep, "decode"),
            "prefill_offered_load": _per_instance(rep, "prefill", "offered_load"),
            "overloaded": True if warning else (False if recorded else None),
            "warning": warning, "source": source}


def operating_point(reps: list[Rep]) -> dict:
    """A fabric's operating point over its repetitions: per instance the median utilization and
    offered load, ``overloaded`` true when any repetition was flagged (None when none recorded it),
    ``overloaded_reps`` which, ``warning`` the first flag verbatim."""
    per = [rep_operating_point(r) for r in reps]

    def med(key: str) -> dict[str, float]:
        keys = sorted({k for p in per for k in p[key]}, key=_index_key)
        return {k: round(statistics.median([p[key][k] for p in per if k in p[key]]), 4) for k in keys}

    flags = [p["overloaded"] for p in per]
    return {"prefill_utilization": med("prefill_utilization"), "decode_utilization": med("decode_utilization"),
            "prefill_offered_load": med("prefill_offered_load"),
            "overloaded": True if True in flags else (False if False in flags else None),
            "overloaded_reps": [r.index for r, p in zip(reps, per) if p["overloaded"]],
            "warning": next((p["warning"] for p in per if p["warning"]), None),
            "recorded_reps": [r.index for r, p in zip(reps, per) if p["overloaded"] is not None]}


PREFIX_TOKENS = ("requests", "input_tokens", "cached_tokens", "host_tokens")
PREFIX_RATIOS = ("device_hit_rate", "host_hit_rate", "hit_rate")  # traffic.model.prefix_cache.hit_ratios


def prefix_cache(reps: list[Rep], per: list[dict]) -> dict | None:
    """A fabric's prefix-cache hit: every repetition's tokens pooled (token-weighted, as each repetition's own,
    ``traffic.model.prefix_cache.hit_ratios``) and each repetition's ratios; None when no repetition recorded
    one (a planned replay, or a run from before summary.json's ``prefix_cache``)."""
    recs = [(r.index, m.get("prefix_cache")) for r, m in zip(reps, per) if isinstance(m.get("prefix_cache"), dict)]
    if not recs:
        return None
    total = {k: sum(p.get(k) or 0 for _, p in recs) for k in PREFIX_TOKENS}
    first = recs[0][1]
    return {**total, **hit_ratios(total["input_tokens"], total["cached_tokens"], total["host_tokens"]),
            **{k: first.get(k) for k in ("cache", "hicache_ratio", "assumed_hit", "window")},
            "with_hash_ids": sum(p.get("with_hash_ids") or 0 for _, p in recs),
            "per_rep": [{"rep": i, **{k: p.get(k) for k in (*PREFIX_TOKENS, *PREFIX_RATIOS)}} for i, p in recs]}


def aggregate(exp: ExperimentRun) -> dict:
    """The report's summary.json (its keys are a contract the README documents)."""
    doc: dict = {}
    problems, notes = [], []
    for fabric in exp.fabrics:
        reps = exp.reps[fabric]
        per = [rep_metrics(r) for r in reps]
        entry: dict = {"fabric": fabric, "reps": len(reps), "spread": {}}
        for key in KEYS:
            vals = [flat_get(m, key) for m in per]
            _flat_set(entry, key, _median(vals))
            present = [v for v in vals if v is not None]
            entry["spread"][key] = [min(present), max(present)] if present else None
        entry["ci95"] = fct_ci_ms(reps)
        entry["pfc_enabled"] = any(m["pfc_enabled"] for m in per)
        entry["hottest_queue"] = per[0].get("hottest_queue")
        entry["per_rep"] = per
        fab_problems = [p for r, m in zip(reps, per) for p in fidelity_problems(r, m)]
        entry["fidelity_problems"] = fab_problems
        entry["invariants"] = [invariants_of(r) for r in reps]
        entry["warnings"] = [f"rep{r.index}: {w}" for r in reps for w in (r.summary.get("warnings") or [])]
        cpus = [r.summary["cpu"] for r in reps if isinstance(r.summary.get("cpu"), dict)]
        entry["cpu"] = ({"ovs_vswitchd_cores": _median([c.get("ovs_vswitchd_cores") for c in cpus]),
                         "machine_busy_fraction": _median([c.get("machine_busy_fraction") for c in cpus]),
                         "saturated": any(bool(c.get("saturated")) for c in cpus)} if cpus else None)
        entry["operating_point"] = operating_point(reps)
        entry["prefix_cache"] = prefix_cache(reps, per)
        problems += fab_problems
        notes += [n for r, m in zip(reps, per) for n in consistency_notes(r, m)]
        doc[fabric] = entry
    problems += exp.failed
    doc["ratios"] = ratios(doc.get("zcube"), doc.get("roft"))
    doc["fidelity_ok"] = not problems
    doc["fidelity_problems"] = problems
    doc["consistency_notes"] = notes
    doc["reps"] = max(len(r) for r in exp.reps.values())
    flags = [doc[f]["operating_point"]["overloaded"] for f in exp.fabrics]
    doc["overloaded"] = True if True in flags else (False if False in flags else None)
    return doc


def ratio(a, b) -> float | None:
    if a is None or b is None or not b:
        return None
    return round(a / b, 4)


def ratios(zcube: dict | None, roft: dict | None) -> dict:
    """ZCube over ROFT for RATIO_KEYS (empty when a fabric is missing)."""
    if not zcube or not roft:
        return {}
    return {k: ratio(flat_get(zcube, k), flat_get(roft, k)) for k in RATIO_KEYS}
