"""The ideal network as a backend: no fabric, no root, no queues; every message as fast as its sender's
NICs allow.

The planned replay: each message arrives at its ideal FCT (its bytes and headers at the link rate,
``traffic.model.metrics.ideal_fct_s``) after its planned start. The live driver: the serving cluster
runs in-process against ``traffic.model.serving.run_ideal`` (each GPU sends its messages one after the
other at both NIC ports' real rate, a non-blocking fabric, receivers never congested), in cluster time;
its times are reported as the emulated fabric's would be (cluster time x dilation). A reference for
what the network costs, and a run directory ``report`` reads on any machine.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from common import scale
from fabrics import build_fabric
from fabrics.routing import port_pairs
from testbed.backends.base import (
    Backend,
    Carried,
    Conditions,
    FabricRecord,
    FabricSpec,
    LinkSettings,
    Log,
    Network,
    PlannedTraffic,
    ServingOutcome,
    ServingTraffic,
)
from traffic.runtime.records import NEVER_COMPLETED

LOSSLESS = {"enabled": False}  # no queues, nothing to pause
# A live repetition's wall seconds on this 2-core machine: the serving cluster's events, its messages and their
# write-up grow with the GPUs and the cluster seconds (the default's load per GPU): ~0.008 s per GPU and cluster
# second, from runs of the default at n=32 (28 cluster s), 128 and 512 (6 cluster s), the machine shared
PER_GPU_CLUSTER_S = 0.008
FIXED_S = 1.0


def _row(plan: dict, start: float | None, end: float | None) -> dict:
    """A merged row (``traffic.runtime.records.COLUMNS``) of a message sent at ``start``, delivered at ``end``."""
    done = start is not None and end is not None
    row = {"id": plan["id"], "request_id": plan.get("request_id"), "src": plan["src"], "dst": plan["dst"],
           "src_ip": plan["src_ip"], "dst_ip": plan["dst_ip"], "bytes": plan["bytes"],
           "received_bytes": plan["bytes"] if done else None, "scheduled_start": plan["start"], "start": start,
           "first_byte": start if done else None, "end": end, "sender_end": end, "verified": done,
           "error": None if done else NEVER_COMPLETED}
    row.update((k, plan[k]) for k in ("kind", "engine", "step") if k in plan)
    return row


class IdealBackend(Backend):
    name = "ideal"
    forks = True

    def estimate(self, exp) -> tuple[float, str] | None:
        """A live repetition: ``FIXED_S`` + ``PER_GPU_CLUSTER_S`` x GPUs x cluster seconds (the planned replay:
        None, the flat ``setup_s``)."""
        if exp.serving.driver != "live":
            return None
        cluster_s = exp.trace.duration_s / (1.0 if exp.serving.arrivals == "closed" else exp.trace.speed)
        s = FIXED_S + PER_GPU_CLUSTER_S * exp.gpus * cluster_s
        return s, f"{exp.gpus} GPUs x {cluster_s:g} cluster s x {PER_GPU_CLUSTER_S:g} s"

    def network(self, spec: FabricSpec) -> Network:
        return Network(build_fabric(**spec.args), LinkSettings.of(spec.datapath, spec.represents_bps))

    def _record(self, spec: FabricSpec) -> FabricRecord:
        return FabricRecord(dict(spec.args), dataclasses.asdict(spec.datapath), dict(LOSSLESS))

    def carry(self, spec: FabricSpec, traffic: PlannedTraffic, conditions: Conditions, run_dir: Path,
              log: Log) -> Carried:
        from traffic.model.metrics import ideal_fct_s

        self.refuse_unsupported(conditions)
        link = self.network(spec).link
        rows = []
        for p in sorted(traffic.rows, key=lambda r: (r["start"], r["id"])):
            fct = ideal_fct_s(p["bytes"], link.rate_bps, mtu_payload=link.payload_bytes,
                              header_bytes=scale.HEADER_BYTES)
            rows.append(_row(p, p["start"], p["start"] + fct))
        log(f"{len(rows)} transfers delivered at their ideal FCT")
        return Carried(0.0, max((r["end"] for r in rows), default=0.0), rows, self._record(spec), None)

    def serve(self, spec: FabricSpec, traffic: ServingTraffic, conditions: Conditions, run_dir: Path,
              log: Log) -> Carried:
        from traffic.model import serving
        from traffic.runtime import serving_results

        self.refuse_unsupported(conditions)
        cluster = traffic.cluster()
        cpu = time.process_time()
        serving.run_ideal(cluster, port_bps=spec.represents_bps)
        cpu_s = round(time.process_time() - cpu, 3)
        dilation = traffic.dilation
        policy, ips = traffic.config["policy"], traffic.config["ips"]
        choices: dict[tuple[int, int], tuple] = {}
        used: dict[tuple[int, int], int] = {}
        rows = []
        for m in sorted(cluster.messages.values(), key=lambda m: m.id):
            options = choices.get((m.src_gpu, m.dst_gpu))  # the policy's port pairs in turn, as the coordinator
            if options is None:
                options = choices[(m.src_gpu, m.dst_gpu)] = port_pairs(m.src_gpu, m.dst_gpu, policy)
            k = used.get((m.src_gpu, m.dst_gpu), 0)
            used[(m.src_gpu, m.dst_gpu)] = k + 1
            sp, dp = options[k % len(options)]
            sent, got = cluster.sent_at[m.id] * dilation, cluster.delivered_at.get(m.id)
            plan = {"id": m.id, "request_id": m.request_id, "src": f"gpu{m.src_gpu}", "dst": f"gpu{m.dst_gpu}",
                    "src_ip": ips[str(m.src_gpu)][sp - 1], "dst_ip": ips[str(m.dst_gpu)][dp - 1], "bytes": m.bytes,
                    "start": round(sent, 6), "kind": m.kind, "engine": m.engine, "step": m.step}
            rows.append(_row(plan, sent, None if got is None else got * dilation))
        rows.sort(key=lambda r: (r["scheduled_start"], r["id"]))
        results = serving_results.write_results(run_dir, cluster, t0=0.0, dilation=dilation, cpu_s=cpu_s, failed={},
                                                lag_s=[])
        log(f"served {traffic.duration_s:g} s of cluster time against the ideal network: {len(rows)} messages")
        t_end = max((r["end"] for r in rows if r["end"] is not None), default=0.0)
        return Carried(0.0, t_end, rows, self._record(spec), None, serving=ServingOutcome(results), cpu_s=cpu_s)
