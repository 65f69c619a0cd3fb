"""``Ns3Backend``: the repetition on the ns-3 twin (no root, no Open vSwitch, no namespaces).

The same seam as the emulator's: ``network`` gives the fabric model and link settings, ``serve`` drives
the serving cluster with the twin in the loop, ``carry`` replays a plan. A run's clock is the simulated
time (t0 = 0); the write-up reads the rows, counters and pause log as it reads the emulator's, and the
twin adds twin.json (its speed) to the run directory.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from common.errors import EnvironmentProblem, TestbedError
from fabrics import build_fabric
from testbed.backends.base import (
    QUEUES,
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
from testbed.backends.ns3 import apps, assumptions, engine, pfc, plan, summarise
from testbed.backends.ns3 import estimate as cost


class Ns3Backend(Backend):
    name = "ns3"
    realtime = False
    forks = False  # ns-3's bindings (cppyy's cling) fail to initialise in a forked child: one at a time
    builds = frozenset({QUEUES})  # the twin's switch queues take the PFC policy's limits and thresholds
    routes_itself = True
    setup_s = cost.FALLBACK_S  # a repetition without a load model (cost.for_experiment): building the network
    once_s = cost.LOAD_S  # loading ns-3 and compiling the twin, once per process

    def estimate(self, exp) -> tuple[float, str] | None:
        return cost.for_experiment(exp)

    def check(self, build_own: bool) -> None:
        if not engine.available():
            raise EnvironmentProblem("the ns3 backend needs the ns3 package: pip install ns3==3.44.post0")

    def network(self, spec: FabricSpec) -> Network:
        return Network(build_fabric(**spec.args), LinkSettings.of(spec.datapath, spec.represents_bps))

    def _start(self, spec: FabricSpec, conditions: Conditions, log: Log):
        self.refuse_unsupported(conditions)
        net = self.network(spec)
        model = conditions.twin if conditions.twin is not None else assumptions.DEFAULT
        # headroom from the cables and reaction the twin is built with (plan.build reads the same model)
        resolved = pfc.resolve(spec.pfc, net.link, model.cable_delay_us * 1e-6, model.pause_reaction_us * 1e-6)
        engine.load()
        t = time.monotonic()
        engine.configure(net.link.mtu, conditions.seed, conditions.twin)
        recording = None
        if conditions.recorded_paths is not None:
            from testbed.backends.paths import Recording

            recording = Recording.load(conditions.recorded_paths, net.model)
        built = plan.build(net.model, net.link, resolved, conditions.seed, conditions.hash_seed, recording,
                           conditions.twin)
        build_s = time.monotonic() - t
        log(f"twin: {net.model.describe()}, {len(built.queues)} queues, PFC "
            f"{'on' if resolved else 'off'}, paths {'recorded in ' + recording.source if recording else 'by the hash'} "
            f"(ns-3 loaded in {engine.load_s():g} s, built in {build_s:.1f} s)")
        return net, resolved, built, max(build_s, 0.0)

    def _finish(self, spec: FabricSpec, net: Network, resolved, built, sampler, rows: list[dict],
                run_dir: Path, cluster_s: float, wall_s: float, build_s: float, log: Log,
                serving: ServingOutcome | None, cpu_s: float | None) -> Carried:
        tb = engine.load()
        counters = summarise.counters(built, sampler)
        pauses = pfc.pause_log(resolved, str(built.twin.Log()))
        sim_s, events = float(tb.Now()), int(tb.Events())
        no_route, failures = int(built.twin.noRoute), int(built.twin.connectFailures)
        first_no_route = str(built.twin.firstNoRoute)
        device_drops = int(built.twin.deviceDrops)
        figures = summarise.speed(wall_s=wall_s, build_s=build_s, load_s=engine.load_s(), sim_s=sim_s,
                                  cluster_s=cluster_s, events=events, packets=summarise.packets(sampler),
                                  gpus=net.model.n_gpus, kind=net.model.kind)
        figures["device_drops"] = device_drops
        if resolved is not None:  # what the busiest feeding link used of its headroom after a hold (bytes)
            figures["pfc_headroom"] = {"bytes": int(resolved.headroom_bytes), "most_used": int(built.twin.headroomUsed),
                                       "drops_over": int(built.twin.headroomDrops)}
        if cpu_s is not None:  # the loop's CPU seconds: its cost when other jobs share the cores
            figures["cpu_s"] = cpu_s
            figures["cpu_per_cluster_s"] = round(cpu_s / cluster_s, 3) if cluster_s > 0 else None
        figures["ecmp"] = plan.ecmp_outcome(built)
        summarise.write_speed(run_dir, figures)
        del built.twin
        tb.Destroy()
        if no_route or failures:
            raise TestbedError(f"the twin had {no_route} packets without a route (first: {first_no_route}) and "
                              f"{failures} failed connections")
        pfc.check_lossless(resolved, counters.drops("switch"))
        log(f"twin: {sim_s:.1f} simulated s in {wall_s:.1f} wall s ({figures['wall_per_cluster_s']} wall s per "
            f"cluster s, {figures['events_per_wall_s']} events/s, peak RSS {figures['peak_rss_mb']:.0f} MB, "
            f"{device_drops} device drops)")
        t_end = max((r["end"] for r in rows if r["end"] is not None), default=0.0)
        warnings = ()
        hashed = figures["ecmp"].get("hashed_multipath")
        if hashed:  # a recording was given, yet some multipath directions were not in it
            warnings = (f"{hashed} multipath connection directions were not in the recording "
                        f"({figures['ecmp']['recorded_from']}) and took the model's hash",)
            log("twin: " + warnings[0])
        record = FabricRecord(dict(spec.args), dataclasses.asdict(spec.datapath), pfc.record(resolved), warnings)
        return Carried(0.0, max(t_end, counters.t_last), rows, record, counters, pauses, serving=serving, cpu_s=cpu_s)

    def carry(self, spec: FabricSpec, traffic: PlannedTraffic, conditions: Conditions, run_dir: Path,
              log: Log) -> Carried:
        net, resolved, built, build_s = self._start(spec, conditions, log)
        t = time.monotonic()
        plan_rows, sampler = apps.carry(built, traffic.rows)
        wall_s = time.monotonic() - t
        rows = summarise.merged_rows(plan_rows, built.twin, key=lambda i, _r: i)
        span = max((r["start"] for r in plan_rows), default=0.0)
        return self._finish(spec, net, resolved, built, sampler, rows, run_dir, span, wall_s, build_s, log, None,
                            None)

    def serve(self, spec: FabricSpec, traffic: ServingTraffic, conditions: Conditions, run_dir: Path,
              log: Log) -> Carried:
        from traffic.runtime import serving_results

        net, resolved, built, build_s = self._start(spec, conditions, log)
        cluster = traffic.cluster()
        t, cpu = time.monotonic(), time.process_time()
        progress = apps.Progress(log, traffic.duration_s, traffic.dilation)
        sent, sampler = apps.serve(built, cluster, traffic.config, traffic.dilation, traffic.duration_s, progress)
        wall_s, cpu_s = time.monotonic() - t, round(time.process_time() - cpu, 3)
        rows = summarise.merged_rows(sent, built.twin)
        del sent
        results = serving_results.write_results(run_dir, cluster, t0=0.0, dilation=traffic.dilation, cpu_s=cpu_s,
                                                failed={}, lag_s=[])
        log(f"served {traffic.duration_s:g} s of cluster time on the twin: {len(rows)} messages, "
            f"{cluster.in_flight} in flight at the end")
        return self._finish(spec, net, resolved, built, sampler, rows, run_dir, traffic.duration_s, wall_s, build_s,
                            log, ServingOutcome(results), cpu_s)
