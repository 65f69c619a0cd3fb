"""``bench control-path``: how long an order takes from the cluster's decision to the wire, at a given load.

On a real fabric (the default experiment's: its link settings and PFC), with real agents in the GPUs'
namespaces, a synthetic load with a decode step's shape (``traffic.runtime.pulse``: every period a burst
of ``burst`` messages between GPUs on different servers, set off by a timer, and when its last message
arrived, the burst back, set off by that arrival) goes through each serving path in turn:

* ``hosted``: the cluster and every agent in one process (``traffic.runtime.host``) at SCHED_FIFO, what ``run``
  uses; ``hosted-nice``: the same at nice -10 (as the processes below);
* ``processes``: the coordinator process and one agent process per GPU, orders and arrivals as JSON lines
  over a Unix socket (``traffic.runtime.coordinator``; what several hosts use, and one host used before).

Per message, in wall milliseconds (``due`` is the cluster's time of the send: the timer, or the arrival that
set the burst off):

  ``order_ms``       due -> the sender began the send (the coordinator's timer or the arrival's report, the
                     order's trip, the sender's wake-up, the messages ahead of it in its burst)
  ``send_ms``        -> its frame handed to the socket (``Channel.submit`` or the channel's writer)
  ``order_to_wire_ms``  due -> on the wire: the two above
  ``wire_ms``        -> the receiver's first byte (NIC queue, switches, the receiver's wake-up)
  ``report_ms``      the last byte -> the coordinator acting on it (``control_lag_ms``, every message)

Messages due in the first ``WARMUP_S`` are left out (a pair's persistent connection opens on its first message).

each ``{"p50", "p99", "n"}``, for all messages and per trigger (``timer``: dispatch bursts, ``arrival``:
combine bursts); ``burst_first_ms`` (the first order of each burst: the timer's or the report's own delay)
and ``burst_spread_ms`` (its last order minus its first). Also per path: ``ordered``, ``delivered`` (verified),
``cpu`` (cores per role over the run, ``testbed.bench.cpu_use``), ``wall_s``.

The document (``--json``, and ``bench.json`` in the bench's directory)::

  {"bench": "control-path", "fabric", "gpus", "orders_per_s", "burst", "bytes", "duration_s",
   "load": "load average ...", "paths": {"hosted": {...}, "processes": {...}}, "dir"}
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from common.errors import TestbedError
from testbed.bench import cpu_use
from traffic.model.metrics import percentile

PATHS = ("hosted", "hosted-nice", "processes")
ORDERS_PER_S = 1200.0  # the default experiment at dilation 4: ~121k EP messages in 100 wall s
BURST = 128  # a decode step of the default layout: 16 GPUs x 8 on the other server
BYTES = 64  # an EP message of the default workload is ~55 B emulated (bytes scale 16,667)
DURATION_S = 20.0
WARMUP_S = 2.0  # messages due earlier are not measured: each pair's persistent connection opens on its first


def parse_paths(text: str | None) -> list[str]:
    if text is None:
        return list(PATHS)
    paths = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in paths if p not in PATHS]
    if bad or not paths:
        raise TestbedError(f"--path {text!r}: expected one or more of {', '.join(PATHS)}, comma-separated")
    return paths


def check(orders_per_s: float, burst: int, nbytes: int, duration_s: float) -> None:
    """One line naming the first bad value."""
    for flag, value, lo in (("--rate", orders_per_s, 1.0), ("--burst", burst, 1), ("--bytes", nbytes, 1),
                            ("--duration", duration_s, 1.0)):
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value < lo:
            raise TestbedError(f"{flag} {value!r}: expected a number >= {lo:g}")
    if 2 * burst / orders_per_s > duration_s:
        raise TestbedError(f"--duration {duration_s:g} s holds no step of 2 x {burst} orders at {orders_per_s:g} "
                           "orders/s: raise --duration or --rate")


def stats(values: list[float]) -> dict:
    if not values:
        return {"p50": None, "p99": None, "n": 0}
    return {"p50": round(percentile(values, 50), 3), "p99": round(percentile(values, 99), 3), "n": len(values)}


def _sent_records(agents_dir: Path) -> dict[int, dict]:
    from traffic.runtime import records

    out = {}
    for path in sorted(agents_dir.glob("*.sent.jsonl")):
        for r in records.read_jsonl(path):
            out[r["id"]] = r
    return out


def analyze(agents_dir: Path, t0: float, serving: dict) -> dict:
    """The stages of every message of one path's run (see the module docstring)."""
    from traffic.runtime import records

    rows = [r for r in records.merge_results(agents_dir, t0=t0)
            if r["scheduled_start"] is None or r["scheduled_start"] >= WARMUP_S]
    sent = _sent_records(agents_dir)
    stages: dict[str, dict[str, list[float]]] = {k: {"all": [], "timer": [], "arrival": []}
                                                for k in ("order_ms", "send_ms", "order_to_wire_ms", "wire_ms")}
    bursts: dict[tuple, list[float]] = {}
    for r in rows:
        s = sent.get(r["id"])
        if r["start"] is None or r["scheduled_start"] is None or s is None:
            continue
        trigger = "timer" if r.get("kind") == "dispatch" else "arrival"
        wire = s.get("connected")
        values = {"order_ms": r["start"] - r["scheduled_start"]}
        if wire is not None:
            wire -= t0
            values["send_ms"] = wire - r["start"]
            values["order_to_wire_ms"] = wire - r["scheduled_start"]
            if r["first_byte"] is not None:
                values["wire_ms"] = r["first_byte"] - wire
        for k, v in values.items():
            stages[k]["all"].append(v * 1e3)
            stages[k][trigger].append(v * 1e3)
        bursts.setdefault((r.get("step"), r.get("kind")), []).append(values["order_ms"] * 1e3)
    out = {k: {t: stats(v) for t, v in per.items()} for k, per in stages.items()}
    out["report_ms"] = serving.get("control_lag_ms")
    out["burst_first_ms"] = stats([min(v) for v in bursts.values()])
    out["burst_spread_ms"] = stats([max(v) - min(v) for v in bursts.values()])
    out["ordered"] = len(rows)
    out["delivered"] = sum(1 for r in rows if r["verified"])
    return out


def pulse_config(spec, n_gpus: int, orders_per_s: float, burst: int, nbytes: int, duration_s: float) -> dict:
    """The coordinator's config for the synthetic load on the default experiment's port policy."""
    from testbed.repetition.drivers.live import prepare_live

    setup = prepare_live(spec, n_gpus, spec.fabric.datapath.rate_bps)
    cfg = {k: v for k, v in setup.config.items() if k not in ("spec", "requests")}
    gps = spec.gpus_per_server
    group = list(range(max(1, n_gpus - 2 * gps) + 1, n_gpus + 1))  # the last two servers: the decode engine's
    cfg["pulse"] = {"gpus": group, "gpus_per_server": gps, "burst": burst,
                    "bytes": nbytes, "period_s": 2 * burst / orders_per_s, "duration_s": duration_s, "seed": spec.seed}
    cfg["spec"] = {"duration_s": duration_s}
    cfg["dilation"] = 1.0
    return cfg


def run_path(path: str, gpus: list[int], cfg: dict, out: Path, timeout_s: float, log) -> dict:
    from testbed.backends.base import ServingTraffic
    from testbed.backends.emulated.serving import run_hosted, run_serving

    out.mkdir(parents=True, exist_ok=True)
    runner = run_serving if path == "processes" else run_hosted
    cfg = dict(cfg, scheduling="nice" if path == "hosted-nice" else "fifo")
    t = time.monotonic()
    with cpu_use.Window() as w:
        agents, outcome = runner(gpus, ServingTraffic(cfg), out, timeout_s, "persistent", log)
    res = analyze(agents.agents_dir, agents.t0, outcome.results)
    res |= {"cpu": w.cores, "wall_s": round(time.monotonic() - t, 1), "crashed": agents.crashed,
            "scheduling": outcome.results.get("scheduling", "nice -10")}
    return res


def run_bench(spec, paths: list[str], orders_per_s: float, burst: int, nbytes: int, duration_s: float, out: Path,
              log) -> dict:
    """Bring the fabric of ``spec`` (the default experiment's RepetitionSpec) up, run each path, take it down."""
    from testbed.emulation import fabricctl

    check(orders_per_s, burst, nbytes, duration_s)
    n = spec.fabric.args["gpus"]
    cfg = pulse_config(spec, n, orders_per_s, burst, nbytes, duration_s)
    out.mkdir(parents=True, exist_ok=True)
    fabricctl.require_root()
    load = cpu_use.load_line()
    st = fabricctl.up(spec.fabric.args, spec.fabric.datapath, log=log, pfc=spec.fabric.pfc)
    doc = {"bench": "control-path", "fabric": spec.fabric.kind, "gpus": n, "orders_per_s": orders_per_s,
           "burst": burst, "bytes": nbytes, "duration_s": duration_s, "load": load, "paths": {}, "dir": str(out)}
    try:
        gpus = list(st.model().gpus())
        for path in paths:
            log(f"{path}: {duration_s:g} s of {burst}-message bursts at {orders_per_s:g} orders/s")
            doc["paths"][path] = run_path(path, gpus, cfg, out / path, spec.transfer_timeout_s, log)
    finally:
        fabricctl.down()
    doc["load_after"] = cpu_use.load_line()
    (out / "bench.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def table(doc: dict) -> list[str]:
    def f(s: dict | None, key: str = "p50") -> str:
        return "-" if not s or s.get(key) is None else f"{s[key]:.2f}"

    out = [f"bench control-path on {doc['fabric']} n={doc['gpus']}: bursts of {doc['burst']} x {doc['bytes']} B at "
           f"{doc['orders_per_s']:g} orders/s for {doc['duration_s']:g} s ({doc['load']})",
           f"{'path':<10}{'stage (wall ms)':<22}{'P50':>8}{'P99':>8}  {'timer P99':>9}{'arrival P99':>12}"]
    for path, r in doc["paths"].items():
        for key in ("order_ms", "send_ms", "order_to_wire_ms", "wire_ms"):
            s = r[key]
            out.append(f"{path:<10}{key:<22}{f(s['all']):>8}{f(s['all'], 'p99'):>8}  {f(s['timer'], 'p99'):>9}"
                       f"{f(s['arrival'], 'p99'):>12}")
        out.append(f"{path:<10}{'report_ms':<22}{f(r['report_ms']):>8}{f(r['report_ms'], 'p99'):>8}")
        out.append(f"{path:<10}{'burst_first_ms':<22}{f(r['burst_first_ms']):>8}{f(r['burst_first_ms'], 'p99'):>8}")
        out.append(f"{path:<10}{'burst_spread_ms':<22}{f(r['burst_spread_ms']):>8}{f(r['burst_spread_ms'], 'p99'):>8}")
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in r["cpu"].items() if k not in ("cpus", "span_s") and v)
        out.append(f"{path:<10}delivered {r['delivered']}/{r['ordered']}; cores: {cpu}")
    return out
