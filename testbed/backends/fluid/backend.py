"""``FluidBackend``: a repetition on the flow-level network (no root, no packets): every message a flow on the
twin's paths, max-min fair rates over the links, a latency per path (docs/fluid.md).

The same seam as the others: ``network`` gives the fabric model and link settings, ``serve`` drives the serving
cluster's batched path, ``carry`` replays a plan. The run's clock is the simulated time (t0 = 0) at the twin's
scale of bytes and time, so its files compare with the twin's; fluid.json records the engine's speed. It has no
queues, so no PFC, no drops, no faults and no cross traffic.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from fabrics import build_fabric
from testbed.backends.base import (
    Backend,
    Carried,
    Conditions,
    FabricRecord,
    FabricSpec,
    LinkSettings,
    Log,
    Network,
    PauseLog,
    PlannedTraffic,
    ServingOutcome,
    ServingTraffic,
)
from testbed.backends.fluid import estimate as cost
from testbed.backends.fluid import rows as out
from testbed.backends.fluid.loop import run_cluster, run_plan
from testbed.backends.fluid.network import Paths

NO_PFC = {"enabled": False}  # no queues, nothing to pause
WHAT = "flow-level (max-min fair rates, no queues, no PFC, no TCP dynamics)"


class FluidBackend(Backend):
    name = "fluid"
    realtime = False
    forks = True
    routes_itself = True
    setup_s = 5.0
    once_s = cost.LOAD_S

    def estimate(self, exp) -> tuple[float, str] | None:
        return cost.for_experiment(exp)

    def peak_bytes(self, exp) -> float | None:
        return cost.peak_bytes(exp.gpus)

    def network(self, spec: FabricSpec) -> Network:
        return Network(build_fabric(**spec.args), LinkSettings.of(spec.datapath, spec.represents_bps))

    def _paths(self, spec: FabricSpec, conditions: Conditions, log: Log) -> tuple[Network, Paths]:
        self.refuse_unsupported(conditions)
        net = self.network(spec)
        port_seed = conditions.seed if conditions.hash_seed is None else conditions.hash_seed
        recording = None
        if conditions.recorded_paths is not None:
            from testbed.backends.paths import Recording

            recording = Recording.load(conditions.recorded_paths, net.model)
        paths = Paths(net.model, net.link, port_seed, recording)
        log(f"fluid: {net.model.describe()}, {len(paths.queues)} links, paths "
            f"{'recorded in ' + recording.source if recording else 'by the hash'}; {WHAT}")
        return net, paths

    def _record(self, spec: FabricSpec) -> FabricRecord:
        return FabricRecord(dict(spec.args), dataclasses.asdict(spec.datapath), dict(NO_PFC))

    def carry(self, spec: FabricSpec, traffic: PlannedTraffic, conditions: Conditions, run_dir: Path,
              log: Log) -> Carried:
        net, paths = self._paths(spec, conditions, log)
        t, cpu = time.monotonic(), time.process_time()
        served, plan = run_plan(paths, traffic.rows)
        rows = [out.planned_row(p, served.ends[i]) for i, p in enumerate(plan)]
        figures = out.speed(wall_s=time.monotonic() - t, cpu_s=time.process_time() - cpu, setup_s=0.0,
                            cluster_s=traffic.last_start_s, served=served, gpus=net.model.n_gpus, kind=net.model.kind,
                            connections=len(paths.sports), kept={"kv_messages": len(rows), "ep_messages": 0})
        figures["ecmp"] = paths.book.outcome()
        out.write_speed(run_dir, figures)
        log(f"fluid: {len(rows)} transfers in {figures['wall_s']} wall s")
        t_end = max((r["end"] for r in rows if r["end"] is not None), default=0.0)
        counters = out.counters(paths.queues, served)
        return Carried(0.0, max(t_end, counters.t_last), rows, self._record(spec), counters, PauseLog())

    def serve(self, spec: FabricSpec, traffic: ServingTraffic, conditions: Conditions, run_dir: Path,
              log: Log) -> Carried:
        from traffic.runtime import serving_results

        t0 = time.monotonic()
        net, paths = self._paths(spec, conditions, log)
        cluster = traffic.cluster(batched=True)
        setup_s = time.monotonic() - t0
        t, cpu = time.monotonic(), time.process_time()
        served = run_cluster(paths, cluster, traffic.config, traffic.dilation, traffic.duration_s,
                       label=f"fluid {net.model.kind}")
        wall_s, cpu_s = time.monotonic() - t, round(time.process_time() - cpu, 3)
        rows, kept = out.merged_rows(served)
        results = serving_results.write_results(run_dir, cluster, t0=0.0, dilation=traffic.dilation, cpu_s=cpu_s,
                                                failed={}, lag_s=[])
        figures = out.speed(wall_s=wall_s, cpu_s=cpu_s, setup_s=setup_s, cluster_s=traffic.duration_s, served=served,
                            gpus=net.model.n_gpus, kind=net.model.kind, connections=len(paths.sports), kept=kept)
        figures["ecmp"] = paths.book.outcome()
        out.write_speed(run_dir, figures)
        log(f"fluid: {traffic.duration_s:g} cluster s in {wall_s:.1f} wall s ({figures['messages']} messages, "
            f"{figures['solves']} rate solves, set-up {setup_s:.1f} s, peak RSS {figures['peak_rss_mb']:.0f} MB); "
            f"{cluster.in_flight} in flight at the end")
        warnings = (kept["note"],) if kept["note"] else ()
        counters = out.counters(paths.queues, served)
        t_end = max((r["end"] for r in rows if r["end"] is not None), default=0.0)
        return Carried(0.0, max(t_end, counters.t_last), rows, self._record(spec), counters, PauseLog(),
                       serving=ServingOutcome(results, warnings), cpu_s=cpu_s)
