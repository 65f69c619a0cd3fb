"""The emulated fabric as a network backend: Open vSwitch, namespaces and real TCP.

A repetition runs on the fabric that is up (it must be the one asked for) or on one this backend
brings up for it and takes down again. Around the traffic: the queue sampler (``sampler``), cross
traffic (``cross``) and the fault schedule (``faults``); the traffic itself is carried by one agent
per GPU (``agents``), on a plan or on the serving coordinator's orders (``serving``). The pause
log and the pause daemon's figures are read from the fabric's state directory before it goes down.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from common.errors import TestbedError
from fabrics import build_fabric
from pfc.files import LATENCY_FILE, LOG_FILE, STATUS_FILE
from testbed.backends.base import (
    CROSS_TRAFFIC,
    DATAPATH,
    FAULTS,
    QUEUES,
    Backend,
    Carried,
    Conditions,
    FabricRecord,
    FabricSpec,
    Held,
    LinkSettings,
    Log,
    Network,
    PauseLog,
    PlannedTraffic,
    ServingOutcome,
    ServingTraffic,
)
from testbed.backends.emulated.agents import AgentsRun, run_plan
from testbed.backends.emulated.cross import start_cross_traffic, stop_cross_traffic
from testbed.backends.emulated.faults import FaultScheduler
from testbed.backends.emulated.sampler import QueueSampler
from testbed.emulation import fabricctl
from testbed.emulation.state import FabricState

PFC_FLUSH_S = 1.2  # the pause daemon flushes its log and status once a second

# what runs the traffic on a fabric that is up: (state, on_t0) -> the agents' run and the serving outcome
Runner = Callable[[FabricState, Callable[[float], None] | None], tuple[AgentsRun, ServingOutcome | None]]


class EmulatedBackend(Backend):
    name = "emulated"
    supports = frozenset({CROSS_TRAFFIC, FAULTS})
    builds = frozenset({DATAPATH, QUEUES})
    realtime = True
    setup_s = 40.0  # bring-up, agents' start, lead time, teardown, queue sampling and merge
    # measured (py-spy of a default repetition on ROFT, docs/replay.md "Where a default run's time goes"): on a
    # held fabric the host's start ~3.6 s, ECMP probing ~3.4 s, the write-up ~4 s, the cluster's config ~3 s, the
    # pause log's flush 1.2 s, drain and stops; bring-up ~5 s and teardown ~8 s once per fabric
    held_setup_s = 22.0
    fabric_setup_s = 14.0

    def hold(self, spec: FabricSpec, log: Log) -> "HeldFabric":
        return HeldFabric(spec, log)

    def check(self, build_own: bool) -> None:
        fabricctl.require_root()
        fabricctl.require_ovs()
        st = fabricctl.load_state()
        if build_own and st is not None:
            raise TestbedError(f"a fabric is up ({st.fabric['kind']}, {st.fabric['gpus']} GPUs): run 'testbed down' "
                               "first (run builds every fabric itself, with the experiment's link settings)")

    def network(self, spec: FabricSpec) -> Network:
        st = fabricctl.load_state()
        if st is None:
            return Network(build_fabric(**spec.args), LinkSettings.of(spec.datapath, spec.represents_bps))
        if st.fabric["kind"] != spec.kind or st.fabric["gpus"] != spec.args["gpus"]:
            raise TestbedError(f"a different fabric is up ({st.fabric['kind']}, {st.fabric['gpus']} GPUs): "
                               "run 'testbed down' first")
        return Network(st.model(), LinkSettings.of(st.config, spec.represents_bps))

    def carry(self, spec: FabricSpec, traffic: PlannedTraffic, conditions: Conditions, run_dir: Path,
              log: Log) -> Carried:
        def run(st: FabricState, on_t0) -> tuple[AgentsRun, None]:
            gpus = list(st.model().gpus())
            return run_plan(gpus, traffic.rows, run_dir / "agents", conditions.timeout_s, conditions.connections,
                            log, on_t0=on_t0), None

        return self._session(spec, conditions, run_dir, log, run)

    def serve(self, spec: FabricSpec, traffic: ServingTraffic, conditions: Conditions, run_dir: Path,
              log: Log) -> Carried:
        from testbed.backends.emulated.serving import run_hosted

        def run(st: FabricState, on_t0) -> tuple[AgentsRun, ServingOutcome]:
            gpus = list(st.model().gpus())
            return run_hosted(gpus, traffic, run_dir, conditions.timeout_s, conditions.connections, log, on_t0,
                              port_seed=hash_seed(conditions))

        return self._session(spec, conditions, run_dir, log, run)

    def _session(self, spec: FabricSpec, cond: Conditions, run_dir: Path, log: Log, run: Runner) -> Carried:
        """Sample the queues and run the traffic (with cross traffic and faults around it) on the fabric,
        bringing it up and down again when none was up."""
        from traffic.runtime import records

        self.refuse_unsupported(cond)
        st = fabricctl.load_state()
        own = st is None
        try:
            if own:
                fabricctl.require_root()
                st = fabricctl.up(spec.args, spec.datapath, log=log, pfc=spec.pfc)
            marks = None if own else pause_marks(st)  # a held fabric: this repetition's part of its files
            sampler = QueueSampler(st)
            sampler.start()
            cross = start_cross_traffic(st.model(), cond.cross_flows, cond.seed, cond.cross_s) if cond.cross_flows \
                else []
            scheduler = FaultScheduler(list(cond.faults), cond.wall_per_run_s, run_dir / "faults.jsonl", log) \
                if cond.faults else None
            try:
                agents_run, serving = run(st, scheduler.start if scheduler else None)
            finally:
                events = scheduler.finish() if scheduler else None
                fault_errors = scheduler.errors if scheduler else None
                cross_result = stop_cross_traffic(cross) if cross else None
                sampler.stop()
            t_end = time.monotonic()
            if serving is not None and serving.results.get("connections") is not None:
                from testbed.backends.emulated import ecmp

                ecmp.record(st, serving.results["connections"], hash_seed(cond), cond.hash_seed is not None, run_dir,
                            log)
            pauses = pause_log(st, marks)
            fabric = FabricRecord(st.fabric, st.config, st.pfc, tuple(st.warnings))
        finally:
            if own and fabricctl.load_state() is not None:
                fabricctl.down()
        rows = records.merge_results(agents_run.agents_dir, t0=agents_run.t0)
        return Carried(agents_run.t0, t_end, rows, fabric, sampler.counters(), pauses, agents_run.crashed,
                       agents_run.ready_s, agents_run.cpu_s, serving, cross_result, events, fault_errors)


def hash_seed(cond: Conditions) -> int:
    """The seed the agents draw their connections' source ports from (ROFT's ECMP outcome): the conditions'
    ``hash_seed``, else the repetition's seed."""
    return cond.seed if cond.hash_seed is None else cond.hash_seed


class HeldFabric(Held):
    """One fabric for several repetitions: up on entry, down on exit (also on Ctrl-C). A repetition on it
    still gets its own queue counters (its sampler's first and last snapshots), its own slice of the pause
    log (by time, as always) and its own pause latencies (the daemon's latency lines written during it), and
    fresh TCP connections (so fresh ECMP hash outcomes). Bring-up and teardown are paid once per fabric."""

    holds = True

    def __init__(self, spec: FabricSpec, log: Log) -> None:
        self.spec, self.log = spec, log

    def __enter__(self) -> "HeldFabric":
        fabricctl.require_root()
        fabricctl.up(self.spec.args, self.spec.datapath, log=self.log, pfc=self.spec.pfc)
        return self

    def __exit__(self, *exc) -> None:
        if fabricctl.load_state() is not None:
            fabricctl.down()

    def renew(self) -> None:
        self.__exit__(None, None, None)
        self.__enter__()


def pause_marks(st: FabricState) -> dict:
    """Where the pause daemon's cumulative files stand now (a repetition on a held fabric reads past them)."""
    try:
        lat = (st.directory / LATENCY_FILE).stat().st_size
    except OSError:
        lat = 0
    try:
        errors = json.loads((st.directory / STATUS_FILE).read_text()).get("netlink_errors") or 0
    except (OSError, ValueError):
        errors = 0
    return {"latency_bytes": lat, "netlink_errors": errors}


def _latencies_since(st: FabricState, offset: int) -> tuple[dict | None, dict | None]:
    """Pause and resume latency percentiles (ms) of the daemon's latency lines past ``offset``."""
    from pfc.analysis import percentiles

    try:
        with open(st.directory / LATENCY_FILE, "rb") as fh:
            fh.seek(offset)
            text = fh.read().decode(errors="replace")
    except OSError:
        return None, None
    lat: dict[str, list[float]] = {"pause": [], "resume": []}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 7 and parts[0] in lat:
            try:
                lat[parts[0]].append(float(parts[6]))
            except ValueError:
                continue
    return percentiles(lat["pause"]), percentiles(lat["resume"])


def pause_log(st: FabricState, marks: dict | None = None) -> PauseLog:
    """The pause daemon's figures and the fabric's pause log, read before the fabric goes down."""
    if not st.pfc_enabled:
        return PauseLog()
    time.sleep(PFC_FLUSH_S)
    try:
        status = json.loads((st.directory / STATUS_FILE).read_text())
    except (OSError, ValueError):
        status = {}
    try:
        lines = (st.directory / LOG_FILE).read_text().splitlines()
    except OSError:
        lines = []
    if marks is None:
        return PauseLog(True, tuple(lines), status.get("pause_latency_ms"), status.get("resume_latency_ms"),
                        status.get("netlink_errors"))
    pause, resume = _latencies_since(st, marks["latency_bytes"])
    errors = status.get("netlink_errors")
    return PauseLog(True, tuple(lines), pause, resume,
                    None if errors is None else max(0, errors - marks["netlink_errors"]))
