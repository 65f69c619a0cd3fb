"""The agents of a fabric spread over hosts: per host, one launcher (``traffic.runtime.launcher``) over an
SSH channel (its stdin and stdout are the channel's) forks that host's agents; plan files go there over
SFTP and the records come back the same way, their times moved onto the first host's clock."""

from __future__ import annotations

import json
import posixpath
import shlex
import threading
import time
from dataclasses import asdict
from pathlib import Path

from common.errors import EnvironmentProblem
from common.paths import REPO
from testbed.backends.emulated.agents import AGENTS_READY_TIMEOUT_S, AgentsRun, agent_specs, plan_orders
from testbed.emulation.hosts import cluster
from testbed.emulation.hosts.remote import HostProblem
from traffic.runtime.launcher import START_MARGIN_S, STOP_TIMEOUT_S

TIME_KEYS = ("start", "end", "scheduled_start", "first_byte", "last_byte", "connected", "t")


def agents_dir_on(host: str) -> str:
    return f"{cluster.node_dir(host)}/agents"


def local_address(towards: str) -> str:
    """This machine's address on the route to ``towards`` (where the hosts reach the coordinator)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((towards, 9))
        return s.getsockname()[0]


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


def stop_fleets(fleets: dict[str, RemoteFleet]) -> dict[str, int]:
    """Stop every host's launcher; agent name -> exit status of those that answered."""
    exits: dict[str, int] = {}
    for f in fleets.values():
        try:
            exits |= f.stop()
        except Exception:  # noqa: BLE001 - a lost host's channel
            pass
    return exits


def collect(cl, fleets: dict[str, RemoteFleet], exits: dict[str, int], agents_dir: Path, rel: dict[str, float],
            names: list[str]) -> tuple[dict[str, int], float]:
    """Every host's records into ``agents_dir``, moved by ``rel[host]`` onto the first host's clock; the
    agents that crashed (-9: no exit status came back) and the agents' CPU seconds."""
    cl.check_alive()
    for h in fleets:
        fetch(cl, h, agents_dir, rel[h])
    crashed = {n: rc for n, rc in exits.items() if rc != 0} | {n: -9 for n in names if n not in exits}
    return crashed, sum(sum(f.cpu_s.values()) for f in fleets.values())


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
        exits = stop_fleets(fleets)
    crashed, cpu = collect(cl, fleets, exits, agents_dir, rel, names)
    # t0 on the coordinator's clock, records on the first host's: move t0 there too
    return AgentsRun(t0 + offsets[cl.first].offset_ms / 1e3, agents_dir, crashed, round(ready_s, 3), round(cpu, 3))
