"""The emulated fabric spread over several hosts (``run --hosts FILE``): the same repetition, carried by
agents on every host.

The fabric comes up with ``cluster.up`` (each host's part built by the one-host code) and goes down
again after the repetition. Per host, one launcher (``traffic.runtime.launcher``, over an SSH channel:
its stdin and stdout are the channel's) forks the agents of that host's GPUs; their plan files go
there over SFTP and their records come back the same way into the run's ``agents/``. Before the
traffic, every host's clock is measured from the coordinator's over the authenticated control channel
(``traffic.runtime.channel``, minimum-RTT estimate), t0 is handed to each host on its own clock, and the
records of each host are shifted back onto the first host's clock; ``summary.json`` gets the offsets.

The queues are sampled on every host (``node queues``) and the pause logs of every host's daemon are
merged. A host lost mid-run (its SSH connection gone, its launcher ended) fails the repetition with one
line naming it, written into the run directory as ``HOST_LOST``.
"""

from __future__ import annotations

import json
import posixpath
import shlex
import threading
import time
from dataclasses import asdict
from pathlib import Path

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
    ServingTraffic,
)
from testbed.backends.emulated.agents import AGENTS_READY_TIMEOUT_S, AgentsRun, agent_specs, plan_orders
from testbed.backends.emulated.backend import EmulatedBackend
from testbed.emulation.datapath import plan_datapath
from testbed.emulation.hosts import cluster, hostsfile
from testbed.emulation.hosts.remote import HostProblem
from testbed.errors import EnvironmentProblem, TestbedError
from testbed.fabric import build_fabric
from testbed.paths import REPO
from traffic.runtime.launcher import START_MARGIN_S, STOP_TIMEOUT_S


def agents_dir_on(host: str) -> str:
    return f"{cluster.node_dir(host)}/agents"
CLOCK_GOAL_MS = 2.0  # the lateness goal: an offset less certain than this makes the run not fidelity-ok
TIME_KEYS = ("start", "end", "scheduled_start", "first_byte", "last_byte", "connected", "t")
LOST_FILE = "HOST_LOST"


class HostLost(TestbedError):
    """A host lost mid-run: the repetition fails with this one line (not retried: the host is gone)."""

    exit_status = 1


class MultiHostBackend(EmulatedBackend):
    name = "emulated"
    setup_s = 60.0

    def __init__(self, hosts_file: str, tunnel: str = "vxlan") -> None:
        self.hosts_file, self.tunnel = hosts_file, tunnel

    def check(self, build_own: bool) -> None:
        hostsfile.load(self.hosts_file)

    def network(self, spec: FabricSpec) -> Network:
        return Network(build_fabric(**spec.args), LinkSettings.of(spec.datapath, spec.represents_bps))

    def carry(self, spec: FabricSpec, traffic: PlannedTraffic, conditions: Conditions, run_dir: Path,
              log: Log) -> Carried:
        self.refuse_unsupported(conditions)
        if conditions.cross_flows or conditions.faults:
            raise TestbedError("cross traffic and faults are not supported with --hosts yet")
        cl = cluster.up(self.hosts_file, spec.args, spec.datapath, spec.pfc, self.tunnel, log)
        try:
            clocks = measure_clocks(cl, log)
            sampler = RemoteSampler(cl, spec)
            sampler.start()
            try:
                agents_run = run_plan_remote(cl, traffic.rows, run_dir / "agents", conditions.timeout_s,
                                             conditions.connections, clocks, log)
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
                       agents_run.ready_s, agents_run.cpu_s, clocks=clocks_doc(clocks, cl))

    def serve(self, spec: FabricSpec, traffic: ServingTraffic, conditions: Conditions, run_dir: Path,
              log: Log) -> Carried:
        raise TestbedError("serving.driver live is not supported with --hosts yet: use --set serving.driver=plan")


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
def measure_clocks(cl, log) -> dict:
    """host -> channel.Offset of its CLOCK_MONOTONIC from the coordinator's, over the authenticated channel."""
    from traffic.runtime import channel

    secret = channel.new_secret()
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


def local_address(towards: str) -> str:
    """This machine's address on the route to ``towards`` (where the hosts reach the coordinator)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((towards, 9))
        return s.getsockname()[0]


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


# ------------------------------------------------------------------ agents
class RemoteFleet:
    """One host's launcher, over an SSH channel: its agents, their readiness, t0, stop, the records."""

    def __init__(self, cl, host: str, specs: list, names: list[str]) -> None:
        self.cl, self.host, self.names = cl, host, names
        self.exits: dict[str, int] = {}
        self.cpu_s: dict[str, float] = {}
        self.done = threading.Event()
        h = cl.hosts[host]
        path = cl.upload(host, "agents/launcher.json", json.dumps([asdict(s) for s in specs]))
        cmd = (f"cd {shlex.quote(h.project_dir(str(REPO)))} && exec {shlex.quote(h.python_path(str(REPO)))} -m "
               f"traffic.runtime.launcher --specs {path}")
        self.chan = cl.session(host).client.get_transport().open_session()
        self.chan.exec_command(cmd)
        self.stdin, self.stdout = self.chan.makefile_stdin("wb"), self.chan.makefile("rb")
        self._reader = threading.Thread(target=self._read, daemon=True, name=f"launcher-{host}")
        self._reader.start()

    def _read(self) -> None:
        try:
            for line in self.stdout:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if ev.get("event") == "exit":
                    self.exits[ev["name"]] = ev["rc"]
                    self.cpu_s[ev["name"]] = ev.get("cpu_s", 0.0)
                if ev.get("event") == "done":
                    break
        except (OSError, EOFError):
            pass
        self.done.set()

    def alive(self) -> bool:
        return not self.chan.exit_status_ready() and not self.done.is_set()

    def send(self, line: str) -> None:
        try:
            self.stdin.write((line + "\n").encode())
            self.stdin.flush()
        except (OSError, EOFError):
            pass

    def stop(self) -> dict[str, int]:
        self.send("stop")
        self.done.wait(STOP_TIMEOUT_S + 10)
        self.chan.close()
        return dict(self.exits)


def _listdir(cl, host: str) -> list[str]:
    sftp = cl.session(host).client.open_sftp()
    try:
        return sftp.listdir(agents_dir_on(host))
    finally:
        sftp.close()


def fetch(cl, host: str, local: Path, offset_s: float) -> int:
    """Copy a host's agent records into ``local``, their times moved onto the first host's clock."""
    sftp = cl.session(host).client.open_sftp()
    n = 0
    try:
        for name in sftp.listdir(agents_dir_on(host)):
            if name == "launcher.json" or name.endswith(".plan.jsonl"):
                continue
            with sftp.open(posixpath.join(agents_dir_on(host), name), "r") as fh:
                data = fh.read().decode(errors="replace")
            if name.endswith(".jsonl") and offset_s:
                data = shift_times(data, offset_s)
            (local / name).write_text(data)
            n += 1
    finally:
        sftp.close()
    return n


def shift_times(jsonl: str, offset_s: float) -> str:
    """JSON lines with every absolute time key moved by ``-offset_s`` (a host clock onto the first host's)."""
    out = []
    for line in jsonl.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            out.append(line)
            continue
        for k in TIME_KEYS:
            if isinstance(doc.get(k), (int, float)) and not isinstance(doc.get(k), bool):
                doc[k] = doc[k] - offset_s
        out.append(json.dumps(doc))
    return "\n".join(out) + ("\n" if out else "")


def run_plan_remote(cl, rows: list[dict], agents_dir: Path, timeout_s: float, connections: str, offsets: dict,
                    log, ready_timeout_s: float = AGENTS_READY_TIMEOUT_S) -> AgentsRun:
    """``agents.run_plan`` over the hosts: each host's agents on their plan, one t0 (on each host's clock)."""
    from traffic.runtime import records

    agents_dir.mkdir(parents=True, exist_ok=True)
    gpus = list(cl.where.fabric.gpus())
    names = [f"gpu{g}" for g in gpus]
    plans = records.write_plans(rows, agents_dir, agents=names)
    rel = {n: offsets[n].offset_ms / 1e3 - offsets[cl.first].offset_ms / 1e3 for n in cl.hosts.names}
    fleets: dict[str, RemoteFleet] = {}
    started = time.monotonic()
    t0 = None
    try:
        for h in cl.hosts.names:
            mine = cl.where.gpus_on(h)
            for g in mine:
                cl.upload(h, f"agents/gpu{g}.plan.jsonl", Path(plans[f"gpu{g}"]).read_text())
            remote_plans = {f"gpu{g}": f"{agents_dir_on(h)}/gpu{g}.plan.jsonl" for g in mine}
            specs = agent_specs(mine, plan_orders(remote_plans), Path(agents_dir_on(h)), timeout_s, connections)
            fleets[h] = RemoteFleet(cl, h, specs, [f"gpu{g}" for g in mine])
        while True:
            cl.check_alive()
            ready = {h: {f[:-6] for f in _listdir(cl, h) if f.endswith(".ready")} for h in fleets}
            missing = [n for h, f in fleets.items() for n in f.names if n not in ready[h]]
            if not missing:
                break
            for h, f in fleets.items():
                if not f.alive():
                    raise HostProblem(h, f"its agent launcher ended before {len(missing)} agents were ready")
            if time.monotonic() - started > ready_timeout_s:
                raise EnvironmentProblem(f"{len(missing)} agents were not listening after {ready_timeout_s:g} s "
                                         f"({', '.join(missing[:6])})")
            time.sleep(0.2)
        ready_s = time.monotonic() - started
        log(f"{len(names)} agents on {len(fleets)} hosts listening after {ready_s:.2f} s")
        t0 = time.monotonic() + START_MARGIN_S + 0.5
        for h, f in fleets.items():  # each host's t0 on its own clock (coordinator's clock + its offset)
            f.send(f"t0 {t0 + offsets[h].offset_ms / 1e3:.6f}")
        last = max(r["start"] for r in rows)
        deadline = t0 + last + timeout_s + 5
        log(f"replaying {len(rows)} transfers over {last:.1f} s on {len(fleets)} hosts")
        while time.monotonic() < deadline:
            cl.check_alive()
            for h, f in fleets.items():
                if not f.alive():
                    raise HostProblem(h, "lost during the run (its agent launcher ended)")
            done = {n for h in fleets for n in (x[:-5] for x in _listdir(cl, h) if x.endswith(".done"))}
            if len(done) == len(names):
                break
            time.sleep(0.5)
        time.sleep(0.5)
    finally:
        exits: dict[str, int] = {}
        for f in fleets.values():
            try:
                exits |= f.stop()
            except Exception:  # noqa: BLE001 - a lost host's channel
                pass
    cl.check_alive()
    for h in fleets:
        fetch(cl, h, agents_dir, rel[h])
    crashed = {n: rc for n, rc in exits.items() if rc != 0}
    crashed |= {n: -9 for n in names if n not in exits}
    cpu = sum(sum(f.cpu_s.values()) for f in fleets.values())
    # t0 on the coordinator's clock, records on the first host's: move t0 there too
    return AgentsRun(t0 + offsets[cl.first].offset_ms / 1e3, agents_dir, crashed, round(ready_s, 3), round(cpu, 3))
