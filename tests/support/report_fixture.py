"""Synthetic experiment run directories for the report tests (no fabric, no root).

Writes what ``testbed replay`` and ``run`` would write, from seeded random
transfers, small enough (n=16 GPUs, ~150 transfers) to build in a second.
Knobs switch on the conditions the report must notice: PFC files, failed
transfers, a late replay, crashed agents, a saturated CPU, a lossy PFC run, an
overloaded serving cluster (a prefill queue that keeps growing), and a replay
from before the operating point (no instances.csv / queue.csv).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from traffic.model import metrics

RATE = 3_000_000.0
MTU = 3000
FABRIC_CONFIG = {"zcube": {"kind": "zcube", "gpus": 16, "gpus_per_switch": 8, "cables": 4},
                 "roft": {"kind": "roft", "gpus": 16, "gpus_per_server": 8, "radix": 16}}
SWITCHES = {"zcube": ["sw1", "sw2", "sw3", "sw4"], "roft": ["leaf1", "leaf2", "spine1"]}


def ip(gpu: int, port: int) -> str:
    return f"10.{port}.{gpu // 256}.{gpu % 256}"


def operating_point(overloaded: bool = False):
    """(OperatingPoint, overload flag or None) of a hand-made schedule: 40 requests over a 10 s window,
    one every 0.25 s, alternating between 2 FIFO prefill instances (one every 0.5 s each) and 2
    decode instances. Prefill takes 0.375 s (utilization 0.75, the intended operating point), or
    0.8 s when ``overloaded`` (offered load 1.6: the queues grow through the window)."""
    from traffic.model.schedule import RequestTiming
    from traffic.model.schedule import operating_point as measure
    from traffic.model.schedule import overloaded as flag

    service = 0.8 if overloaded else 0.375
    free = [0.0, 0.0]
    timings = []
    for i in range(40):
        arrival, p = i * 0.25, i % 2
        start = max(arrival, free[p])
        free[p] = start + service
        timings.append(RequestTiming(i, arrival, p, (i // 2) % 2, start, start + service, 1000, 10,
                                     start + service + 1.0))
    op = measure(timings, 10.0)
    return op, flag(op)


def write_rep(path: Path, fabric: str, seed: int = 0, trace_seed: int = 0, n_transfers: int = 150, slow: float = 1.0,
              failed: int = 0, pfc: bool = False, warnings: list[str] | None = None, crashed: dict | None = None,
              cpu: dict | None = None, lossless_ok: bool | None = True, ttft_p99: float = 900.0,
              invariants: dict | bool = True, negative_link: bool = False, serving: bool = True,
              overloaded: bool = False, live: float | None = None) -> dict:
    """One replay run directory; returns the summary it wrote. ``invariants``: the summary's block
    (True: all checks hold, False: none, as a run from before them); ``negative_link``: links.csv
    gets the negative spine bytes of issue 14 on its first row. ``serving``: instances.csv,
    queue.csv and the summary's utilizations, written by the replay's own writer (False: a replay
    from before them); ``overloaded``: the schedule overloads prefill, and the summary's first
    warning is the replay's overload flag."""
    rng = np.random.default_rng(seed)
    trace = np.random.default_rng(trace_seed)  # the same transfers on every fabric, as with one trace
    path.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n_transfers):
        src = int(trace.integers(1, 9))
        dst = int(trace.integers(9, 17))
        port = 1 + i % 2
        size = int(trace.choice([300, 2000, 9000, 40000]) + trace.integers(0, 100))
        sched = round(i * 0.05, 6)
        start = sched + float(rng.uniform(0.0005, 0.004))
        fct = metrics.ideal_fct_s(size, RATE) * slow * float(rng.uniform(0.9, 3.0))
        ok = i >= failed
        rows.append({"id": i, "request_id": i // 4, "src": f"gpu{src}", "dst": f"gpu{dst}", "src_ip": ip(src, port),
                     "dst_ip": ip(dst, 3 - port), "bytes": size, "received_bytes": size if ok else 0,
                     "scheduled_start": sched, "start": start if ok else None,
                     "first_byte": start + fct / 2 if ok else None, "end": start + fct if ok else None,
                     "sender_end": start + fct if ok else None, "verified": ok,
                     "error": None if ok else "never completed"})
    cols = list(rows[0])
    with open(path / "transfers.csv", "w") as fh:
        fh.write(",".join(cols) + "\n")
        for r in rows:
            fh.write(",".join("" if r[c] is None else repr(r[c]) if isinstance(r[c], float) else str(r[c])
                              for c in cols) + "\n")
    ok = [r for r in rows if r["verified"]]
    fct_s = [r["end"] - r["start"] for r in ok]
    metrics.write_fct_txt(path / "fct.txt", [
        metrics.FctRecord(int(r["src"][3:]), int(r["dst"][3:]), r["bytes"], int(r["start"] * 1e9),
                          int((r["end"] - r["start"]) * 1e9), int(metrics.ideal_fct_s(r["bytes"], RATE) * 1e9))
        for r in ok])
    # queues: a few samples of every switch port 1..8 and every NIC, drops growing on one queue
    switches = SWITCHES[fabric]
    queues = [(f"{s}:{p}", f"gpu{p}:p1") for s in switches for p in range(1, 9)]
    queues += [(f"gpu{g}:p{p}", switches[0]) for g in range(1, 17) for p in (1, 2)]
    with open(path / "queues.csv", "w") as fh:
        fh.write("time,queue,towards,backlog_bytes,drops,sent_bytes\n")
        for k, t in enumerate(np.arange(100.0, 108.0, 1.0)):
            for j, (q, towards) in enumerate(queues):
                backlog = int(rng.integers(0, 30000)) if j < 3 else 0
                drops = k * 2 if (j == 0 and not lossless_ok) else (k if j == 1 else 0)
                fh.write(f"{t:.3f},{q},{towards},{backlog},{drops},{k * 1000 * (j + 1)}\n")
    drops = 7 * (1 + (0 if lossless_ok else 2))
    with open(path / "links.csv", "w") as fh:
        fh.write("queue,towards,bytes,utilization\n")
        for j, (q, towards) in enumerate(queues):
            u = float(rng.uniform(0, 0.6)) if q.startswith(switches[0]) else float(rng.uniform(0, 0.2))
            if negative_link and j == 0:
                u = -0.0016
            fh.write(f"{q},{towards},{int(u * RATE)},{u:.4f}\n")
    nic: dict[str, list[int]] = {}
    for r in ok:
        nic.setdefault(r["src_ip"], [0, 0])[0] += r["bytes"]
        nic.setdefault(r["dst_ip"], [0, 0])[1] += r["bytes"]
    with open(path / "nics.csv", "w") as fh:
        fh.write("gpu,port,ip,sent_bytes,received_bytes\n")
        for a, (tx, rx) in sorted(nic.items()):
            p, g = int(a.split(".")[1]), int(a.split(".")[3])
            fh.write(f"gpu{g},{p},{a},{tx},{rx}\n")
    per_s: dict[int, int] = {}
    for r in ok:
        per_s[int(r["end"])] = per_s.get(int(r["end"]), 0) + r["bytes"]
    with open(path / "goodput.csv", "w") as fh:
        fh.write("second,bytes,goodput_bps\n")
        for s in range(max(per_s) + 1):
            fh.write(f"{s},{per_s.get(s, 0)},{per_s.get(s, 0) * 8}\n")
    slow_vals = [metrics.fct_slowdown(f, r["bytes"], RATE) for f, r in zip(fct_s, ok)]
    (path / "slowdown_bins.json").write_text(json.dumps(metrics.binned_slowdowns([r["bytes"] for r in ok], slow_vals)))
    pauses = 0
    if pfc:
        lines = []
        ports = [(switches[0], 0, 3), (switches[1], 0, 5), ("gpu3", 1, 1)]
        for k in range(12):
            node, ntype, port = ports[k % len(ports)]
            t = int((100.2 + k * 0.4) * 1e9)  # the monotonic clock, as queues.csv (samples from 100 s)
            # node_type: 1 switch, 0 host
            lines.append(f"{t} {node} {1 - ntype} {port} 1 {switches[0]}:3")
            lines.append(f"{t + 50_000_000} {node} {1 - ntype} {port} 0 {switches[0]}:3")
            pauses += 1
        (path / "pfc.txt").write_text("\n".join(lines) + "\n")
        (path / "pfc_ports.csv").write_text(
            "node,port,queue,pauses,paused_s,longest_pause_s,paused_fraction\n"
            f"{switches[0]},3,{switches[0]}:3,4,0.2,0.05,0.04\n{switches[1]},5,{switches[1]}:5,4,0.2,0.05,0.04\n"
            "gpu3,1,gpu3:p1,4,0.2,0.05,0.04\n")
    first, last = min(r["start"] for r in ok), max(r["end"] for r in ok)
    lateness = [r["start"] - r["scheduled_start"] for r in ok]
    summary = {
        "fabric": fabric, "transfers": len(rows), "verified": len(ok), "failed": len(rows) - len(ok),
        "requests": len({r["request_id"] for r in rows}), "bytes": sum(r["bytes"] for r in ok),
        "goodput_bps": round(sum(r["bytes"] for r in ok) * 8 / (last - first)),
        "goodput_real_equivalent_bps": round(sum(r["bytes"] for r in ok) * 8 / (last - first) * 400e9 / RATE),
        "fct_ms": {k: round(metrics.percentile(fct_s, p) * 1e3, 3)
                   for k, p in (("p50", 50), ("p99", 99), ("p999", 99.9))},
        "slowdown": {"p50": 1.0, "p95": 2.0, "p99": 3.0, "p999": 4.0},
        "ttft_ms": {"p50": ttft_p99 / 3, "p99": ttft_p99},
        "start_lateness_ms": {k: round(metrics.percentile(lateness, p) * 1e3, 3)
                              for k, p in (("p50", 50), ("p99", 99))},
        "requests_per_s": round(len({r["request_id"] for r in ok}) / (last - first), 3),
        "queue_drops": drops, "crashed_agents": crashed or {}, "rate_bps": RATE, "bytes_scale": 400e9 / RATE,
        "warnings": list(warnings or []), "hottest_queue": None, "max_link_utilization": None, "cross_traffic": None,
    }
    if pfc:
        summary["pfc"] = {"enabled": True, "pauses": pauses, "resumes": pauses, "ports_paused": 3, "max_spread_hops": 2,
                          "victim_flows": 5, "lossless_ok": lossless_ok, "paused_fraction_max": 0.04}
    if cpu is not None:
        summary["cpu"] = cpu
    if invariants is True:
        invariants = {"ok": True, "violations": [], "checked": ["counters_monotonic", "switch_conservation"]}
    if invariants:
        summary["invariants"] = invariants
    if serving:
        from testbed.repetition.writeup import write_operating_point

        op, flag = operating_point(overloaded)
        summary |= write_operating_point(path, op)
        if flag:
            summary["warnings"].insert(0, flag)
    elif overloaded:
        summary["warnings"].insert(0, operating_point(True)[1])  # an older replay: the flag, no files
    if live is not None:
        summary |= write_live(path, live, rng)
    (path / "summary.json").write_text(json.dumps(summary, indent=1))
    (path / "config.json").write_text(json.dumps({"fabric": FABRIC_CONFIG[fabric],
                                                  "datapath": {"rate_bps": RATE, "mtu": MTU, "buffer_bytes": 60000},
                                                  "replay": {"trace": "synthetic", "seed": seed}}, indent=1))
    return summary


def write_live(path: Path, tokens_per_s: float, rng) -> dict:
    """requests.csv and steps.csv of a live replay, and its summary keys."""
    reqs = ["request_id,arrival_s,input_tokens,output_tokens,tokens_out,prefill_engine,decode_engine,prefill_start_s,"
            "prefill_end_s,kv_bytes,kv_end_s,first_token_s,done_s,ttft_s"]
    for i in range(40):
        ttft = 0.3 + float(rng.uniform(0, 0.5)) * 1e3 / tokens_per_s
        reqs.append(f"{i},{i * 0.1},500,20,20,0,0,{i * 0.1},{i * 0.1 + 0.1},1000,{i * 0.1 + 0.11},"
                    f"{i * 0.1 + ttft},{i * 0.1 + 1},{ttft}")
    (path / "requests.csv").write_text("\n".join(reqs) + "\n")
    steps = ["engine,step,start_s,compute_end_s,dispatch_end_s,end_s,exchange_s,tokens,requests,ep_bytes,"
             "nvlink_bytes,messages"]
    for k in range(60):
        ex = 0.004 * 1e3 / tokens_per_s
        steps.append(f"decode0,{k + 1},{k * 0.04},{k * 0.04 + 0.03},{k * 0.04 + 0.03 + ex / 2},{k * 0.04 + 0.03 + ex},"
                     f"{ex},64,64,1000000,1000000,16")
    (path / "steps.csv").write_text("\n".join(steps) + "\n")
    return {"driver": "live", "closed_loop": True, "time_dilation": 8.0, "throughput_tokens_per_s": tokens_per_s,
            "decode_step_ms": {"p50": 34.0, "p99": 40.0}, "ep_exchange_ms": {"p50": 4.0, "p99": 8.0},
            "ep_messages": 960, "ep_messages_verified": 960, "ep_bytes": 10**9, "nvlink_bytes": 10**9,
            "kv_bytes": 10**8, "prefill_utilization": {"prefill0": 0.3}, "decode_utilization": {"decode0": 0.95},
            "control_lag_ms": {"p50": 1.0, "p99": 10.0}}


def write_experiment(root: Path, fabrics=("zcube", "roft"), reps: int = 1, rep_options: dict | None = None,
                     versions: bool = True) -> Path:
    """An experiment run directory; ``rep_options[(fabric, k)]`` overrides write_rep's knobs."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "experiment.json").write_text(json.dumps({"fabrics": list(fabrics), "repetitions": reps, "gpus": 16}))
    if versions:
        (root / "versions.json").write_text(json.dumps({"project": "0.1.0", "git": "abc1234", "ovs": "3.1.0",
                                                        "os_ken": "4.2.2", "kernel": "6.1.0", "python": "3.11.2"}))
    for f in fabrics:
        for k in range(1, reps + 1):
            opts = {"seed": k * 10 + (1 if f == "roft" else 0), "slow": 1.0 if f == "zcube" else 1.6,
                    "ttft_p99": 900.0 if f == "zcube" else 1000.0}
            opts |= (rep_options or {}).get((f, k), {})
            write_rep(root / "runs" / f / f"rep{k}", f, **opts)
    return root


# ------------------------------------------------------------ live runs from the serving model
LIVE_GPUS = 16
LIVE_GPUS_PER_SERVER = 4  # four servers: with glm5-recipe, 2 TP4 prefill instances and one EP8 decode group


def live_experiment_doc(layout: str | None = "glm5-recipe", concurrency: int = 16) -> dict:
    """experiment.json's "experiment" of a small live GLM-5 run: experiments/default.yaml at n = 16 on
    four-GPU servers, serving Azure's short chat requests without caches or KV memory (GLM-5's FP8 KV on a
    four-GPU server's H200s holds no 64K context: the report's figures are what these tests read, not the
    default's workload)."""
    from common.paths import AZURE_TRACE
    from testbed.experiment.schema import resolve

    exp = resolve(None).experiment.model_dump(mode="json")
    exp.update(gpus=LIVE_GPUS, gpus_per_server=LIVE_GPUS_PER_SERVER, repetitions=1, load_curve=None,
               sensitivity_result=None, calibration=None)
    exp["trace"] |= {"duration_s": 6.0, "workload": None, "path": str(AZURE_TRACE)}
    exp["serving"] |= {"concurrency": concurrency, "warmup_s": 2.0, "layout": layout,
                       "prefill_chunk_tokens": 8192 if layout in ("glm5-recipe", "single-node") else 512,
                       "dtype": "bf16", "prefix_cache": False, "hicache_ratio": 0.0, "decode_memory": False,
                       "warm_start": False}
    return exp


def write_live_rep(path: Path, fabric: str, exp: dict, seed: int = 0, port_gbps: float = 200.0) -> dict:
    """A live repetition's saved files as the live driver writes them: the serving model run against an ideal
    network of ``port_gbps`` per NIC port (real-cluster time), its requests.csv, steps.csv and messages.csv,
    and summary.json's serving keys from the live driver's own ``serving_summary``; the rest (transfers.csv,
    queues, links, ...) from ``write_rep``. Returns the summary."""
    from dataclasses import replace

    from fabrics import build_fabric
    from testbed.backends.base import LinkSettings, ServingOutcome
    from testbed.repetition.drivers import live, live_summary
    from tests.support.settings import repetition
    from traffic.model import serving
    from traffic.runtime import coordinator, records, serving_results

    cfg = repetition(exp | {"seed": seed})
    setup = live.prepare_live(cfg, exp["gpus"], RATE)
    spec = replace(coordinator.spec_from_config(setup.config), seed=seed)
    cluster = serving.run_ideal(serving.Cluster(spec, _requests(setup)), port_gbps * 1e9)
    base = write_rep(path, fabric, seed=seed)
    serving_results.write_csv(path / "requests.csv", cluster.request_rows())
    serving_results.write_csv(path / "steps.csv", cluster.step_rows())
    dil = cfg.time_dilation
    rows = []
    for m in cluster.messages.values():
        if m.id not in cluster.delivered_at:
            continue
        sp = 1 + m.id % 2
        start, end = cluster.sent_at[m.id] * dil, cluster.delivered_at[m.id] * dil
        rows.append({"id": m.id, "request_id": m.request_id, "src": f"gpu{m.src_gpu}", "dst": f"gpu{m.dst_gpu}",
                     "src_ip": ip(m.src_gpu, sp), "dst_ip": ip(m.dst_gpu, 3 - sp), "bytes": m.bytes,
                     "received_bytes": m.bytes, "scheduled_start": start, "start": start, "first_byte": start,
                     "end": end, "sender_end": end, "verified": True, "error": None, "kind": m.kind,
                     "engine": m.engine, "step": m.step})
    messages = [r for r in rows if r["kind"] != "kv"]
    records.write_transfers_csv(messages, path / "messages.csv", extra=("kind", "engine", "step"))
    res = {k: v for k, v in cluster.results().items() if k not in ("ttft_s", "exchange_s", "decode_step_s")} \
        | {"control_lag_ms": {"p50": 1.0, "p99": 9.0}, "failed_messages": 0, "cpu_s": 5.0}
    link = LinkSettings(RATE, MTU, 18000, 60000, 0, cfg.represents_bps)
    summary = base | live_summary.serving_summary(ServingOutcome(res), setup.traffic, setup.engines, rows, path, link,
                                                  build_fabric(**FABRIC_CONFIG[fabric]), setup.layout)
    summary |= {"represents_bps": cfg.represents_bps, "bytes_scale": setup.bytes_scale * dil}
    (path / "summary.json").write_text(json.dumps(summary, indent=1))
    (path / "config.json").write_text(json.dumps({"fabric": FABRIC_CONFIG[fabric],
                                                  "datapath": {"rate_bps": RATE, "mtu": MTU, "buffer_bytes": 60000},
                                                  "replay": cfg.record()}, indent=1))
    for stale in ("instances.csv", "queue.csv"):  # the planned replay's operating point: not a live run's
        (path / stale).unlink(missing_ok=True)
    return summary


def _requests(setup) -> list:
    from traffic.runtime.coordinator import requests_from_config

    return requests_from_config(setup.config)


def write_live_experiment(root: Path, reps: int = 1, layout: str | None = "glm5-recipe", roft_gbps: float = 120.0,
                          calibration: dict | None = None) -> Path:
    """A live experiment run directory (ZCube at 200 Gbit/s a port, ROFT at ``roft_gbps``: a slower fabric
    stand-in); ``calibration``: written as the run's calibration.json."""
    exp = live_experiment_doc(layout)
    exp["repetitions"] = reps
    root.mkdir(parents=True, exist_ok=True)
    (root / "experiment.json").write_text(json.dumps({"source": "experiments/default.yaml", "overrides": [],
                                                      "experiment": exp}))
    (root / "versions.json").write_text(json.dumps({"project": "0.1.0", "git": "abc1234"}))
    for f in exp["fabrics"]:
        for k in range(1, reps + 1):
            write_live_rep(root / "runs" / f / f"rep{k}", f, exp, seed=k - 1,
                           port_gbps=200.0 if f == "zcube" else roft_gbps)
    if calibration is not None:
        (root / "calibration.json").write_text(json.dumps(calibration))
    return root
