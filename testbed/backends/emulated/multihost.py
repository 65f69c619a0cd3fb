"""The emulated fabric spread over several hosts (``run --hosts FILE``): the same repetition, carried by
agents on every host.

The fabric comes up with ``cluster.up`` (each host's part built by the one-host code) and goes down
again after the repetition. Before the traffic, every host's clock is measured from the coordinator's
over the authenticated control channel (``traffic.runtime.channel``, minimum-RTT estimate); the
agents run on their hosts (``remote_agents``: a planned replay; ``multihost_serving``: the live
serving cluster, its coordinator here and a relay of the control channel on every host) and their
records are moved onto the first host's clock; ``summary.json`` gets the offsets.

The queues are sampled on every host (``node queues``) and the pause logs of every host's daemon are
merged. A host lost mid-run (its SSH connection gone, its launcher ended) fails the repetition with one
line naming it, written into the run directory as ``HOST_LOST``.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import asdict
from pathlib import Path

from common.errors import TestbedError
from common.paths import REPO
from fabrics import build_fabric
from fabrics.datapath import plan_datapath
from testbed.backends.base import (
    Carried,
    Conditions,
    FabricRecord,
    FabricSpec,
    LinkSettings,
    Log,
    Network,
    PauseLog,
    PlannedTraffic,
    QueueCounters,
    QueueInfo,
    ServingOutcome,
    ServingTraffic,
)
from testbed.backends.emulated.agents import AgentsRun
from testbed.backends.emulated.backend import EmulatedBackend
from testbed.backends.emulated.multihost_serving import serve_remote
from testbed.backends.emulated.remote_agents import local_address, run_plan_remote
from testbed.emulation.hosts import cluster, hostsfile
from testbed.emulation.hosts.remote import HostProblem
from traffic.runtime import channel

CLOCK_GOAL_MS = 2.0  # the lateness goal: an offset less certain than this makes the run not fidelity-ok
LOST_FILE = "HOST_LOST"


class HostLost(TestbedError):
    """A host lost mid-run: the repetition fails with this one line (not retried: the host is gone)."""

    exit_status = 1


class MultiHostBackend(EmulatedBackend):
    name = "emulated"
    supports = frozenset()  # no cross traffic or faults over hosts yet: the experiment's check refuses them
    label = "the emulated backend over a hosts file"
    setup_s = 60.0

    def __init__(self, hosts_file: str, tunnel: str = "vxlan") -> None:
        self.hosts_file, self.tunnel = hosts_file, tunnel

    def check(self, build_own: bool) -> None:
        hostsfile.load(self.hosts_file)

    def network(self, spec: FabricSpec) -> Network:
        return Network(build_fabric(**spec.args), LinkSettings.of(spec.datapath, spec.represents_bps))

    def carry(self, spec: FabricSpec, traffic: PlannedTraffic, conditions: Conditions, run_dir: Path,
              log: Log) -> Carried:
        def run(cl, clocks: dict, secret: bytes) -> tuple[AgentsRun, None]:
            return run_plan_remote(cl, traffic.rows, run_dir / "agents", conditions.timeout_s,
                                   conditions.connections, clocks, log), None

        return self._session(spec, conditions, run_dir, log, run)

    def serve(self, spec: FabricSpec, traffic: ServingTraffic, conditions: Conditions, run_dir: Path,
              log: Log) -> Carried:
        def run(cl, clocks: dict, secret: bytes) -> tuple[AgentsRun, ServingOutcome]:
            return serve_remote(cl, traffic, run_dir, conditions.timeout_s, conditions.connections, clocks, secret,
                                log)

        return self._session(spec, conditions, run_dir, log, run)

    def _session(self, spec: FabricSpec, conditions: Conditions, run_dir: Path, log: Log, run) -> Carried:
        """Bring the fabric up over the hosts, measure their clocks, sample every host's queues around
        ``run`` (cluster, clock offsets, the channel's secret -> the agents' run and the serving outcome),
        merge the pause logs, take it down; a host lost on the way fails the repetition in one line."""
        self.refuse_unsupported(conditions)
        cl = cluster.up(self.hosts_file, spec.args, spec.datapath, spec.pfc, self.tunnel, log)
        try:
            secret = channel.new_secret()
            clocks = measure_clocks(cl, log, secret)
            sampler = RemoteSampler(cl, spec)
            sampler.start()
            try:
                agents_run, serving = run(cl, clocks, secret)
            finally:
                sampler.stop()
            t_end = time.monotonic()
            pauses = pause_log(cl, run_dir) if spec.pfc is not None and spec.pfc.enabled else PauseLog()
        except Exception as exc:
            line = lost_line(cl) or (str(exc) if isinstance(exc, HostProblem) else None)
            if line is None:
                raise
            mark_lost(run_dir, line, cl)
            raise HostLost(line) from None
        finally:
            cl.down(log)
        from traffic.runtime import records

        rows = records.merge_results(agents_run.agents_dir, t0=agents_run.t0)
        pfc = asdict(spec.pfc) if spec.pfc is not None else {"enabled": False}
        fabric = FabricRecord({"kind": spec.kind, **{k: v for k, v in spec.args.items() if k != "kind"}},
                              asdict(spec.datapath), pfc)
        return Carried(agents_run.t0, t_end, rows, fabric, sampler.counters(), pauses, agents_run.crashed,
                       agents_run.ready_s, agents_run.cpu_s, serving, clocks=clocks_doc(clocks, cl))


def lost_line(cl) -> str | None:
    """The one line of a host whose SSH connection is gone (None: every host answers)."""
    try:
        cl.check_alive()
    except HostProblem as exc:
        return str(exc)
    return None


def mark_lost(run_dir: Path, line: str, cl) -> None:
    """The run directory says which host was lost (the one line), for the report and for 'clean'."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / LOST_FILE).write_text(line + "\n")
    except OSError:
        pass


# ------------------------------------------------------------------ clocks
def measure_clocks(cl, log, secret: bytes) -> dict:
    """host -> channel.Offset of its CLOCK_MONOTONIC from the coordinator's, over the channel authenticated
    with ``secret`` (copied to every host, 0600, for the run's relays too)."""
    cl.on_all(lambda n: cl.upload(n, "secret", secret.hex()))
    here = local_address(cl.hosts.first.address)
    srv = channel.Server(here, secret, log=log)
    try:
        port = srv.address[1]

        def one(n):
            h = cl.hosts[n]
            cmd = (f"cd {shlex.quote(h.project_dir(str(REPO)))} && {shlex.quote(h.python_path(str(REPO)))} -m "
                   f"traffic.runtime.channel clock --to {here}:{port} --secret-file {cluster.node_dir(n)}/secret "
                   f"--name {n}")
            res = cl.session(n).run(cmd, timeout=60)
            if res.rc:
                raise HostProblem(n, f"clock measurement failed: {res.last_error}")

        cl.on_all(one)
        offsets = srv.wait_clocks(cl.hosts.names, timeout=10)
    finally:
        srv.close()
    missing = [n for n in cl.hosts.names if n not in offsets]
    if missing:
        raise HostProblem(missing[0], "its clock was not measured over the control channel")
    return offsets


def clocks_doc(offsets: dict, cl) -> dict:
    from traffic.runtime import channel

    return {"offsets": channel.relative_to_first(offsets, cl.first), "goal_ms": CLOCK_GOAL_MS,
            "reference": cl.first, "method": "minimum RTT over the control channel"}


# ------------------------------------------------------------------ queues
class RemoteSampler:
    """Every host's queue counters at the start and the end of the traffic (``node queues``)."""

    def __init__(self, cl, spec: FabricSpec) -> None:
        self.cl = cl
        plan = plan_datapath(build_fabric(**spec.args), spec.datapath)
        self.infos = [QueueInfo(q.qid, q.kind, q.towards) for q in plan.queues]
        self.first: dict = {}
        self.last: dict = {}
        self.t_first = self.t_last = 0.0
        self.samples: list = []
        self.error: str | None = None

    def _sample(self) -> dict:
        t = time.monotonic()
        rows = {r["queue"]: r for r in self.cl.queues()}
        self.samples.append((t, rows))
        return rows

    def start(self) -> None:
        self.first, self.t_first = self._sample(), time.monotonic()

    def stop(self) -> None:
        try:
            self.last, self.t_last = self._sample(), time.monotonic()
        except HostProblem as exc:
            self.error = str(exc)
            raise

    def counters(self) -> QueueCounters:
        return QueueCounters(self.infos, self.first, self.last or self.first, self.t_first, self.t_last,
                             list(self.samples), self.error, 0.0)


def pause_log(cl, run_dir: Path) -> PauseLog:
    """Every host's pause log merged (pfc.txt times are CLOCK_MONOTONIC of each host; pseudo-hosts share
    one clock) and the pause/resume latencies split by whether the pause crossed hosts (pfc_hosts.json)."""
    from testbed.emulation.hosts import pfcstats

    time.sleep(1.2)  # the daemons flush once a second
    per_host = cl.pfc()
    lines, lat, status = cluster.merge_pfc(per_host)
    lines.sort(key=lambda ln: int(ln.split()[0]) if ln.split() and ln.split()[0].isdigit() else 0)
    split = pfcstats.split_latencies(lat, cl.where)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "pfc_hosts.json").write_text(json.dumps({"latency": split, "per_host": {
        n: {k: (d.get("status") or {}).get(k) for k in ("pauses", "resumes", "remote", "remote_rx")}
        for n, d in per_host.items()}}, indent=1))
    first = per_host[cl.first].get("status") or {}
    return PauseLog(True, tuple(lines), first.get("pause_latency_ms"), first.get("resume_latency_ms"),
                    sum(int((d.get("status") or {}).get("netlink_errors") or 0) for d in per_host.values()))


