"""The live serving cluster on a fabric spread over hosts.

The coordinator (``traffic.runtime.coordinator``) runs here, on the machine driving the run, behind the
authenticated control channel (``traffic.runtime.channel.Server``, listening on this machine's underlay
address). On every host a relay (``python -m traffic.runtime.channel relay``, over an SSH channel whose
closing ends it) offers the agents a Unix socket, as the coordinator offers one-host agents, and carries
each agent's stream to the coordinator authenticated with the run's secret. Each agent takes its host's
clock offset (``--clock-offset``): the orders' due times move onto its clock and the arrival times it
reports move back onto the coordinator's, so the cluster sees one clock.
"""

from __future__ import annotations

import shlex
import shutil
import socket
import time
from pathlib import Path

from common.paths import REPO
from testbed.backends.base import ServingOutcome, ServingTraffic
from testbed.backends.emulated import serving
from testbed.backends.emulated.agents import AgentsRun, agent_specs
from testbed.backends.emulated.remote_agents import RemoteFleet, agents_dir_on, collect, local_address, stop_fleets
from testbed.emulation.hosts import cluster
from testbed.emulation.hosts.remote import HostProblem
from traffic.runtime import channel
from traffic.runtime.launcher import AGENT_NICE

RELAY_READY_S = 30.0


def relay_socket_on(host: str) -> str:
    """Where a host's agents find the coordinator (its relay's Unix socket)."""
    return f"{cluster.node_dir(host)}/control.sock"


def agent_orders(host: str, offset_s: float):
    """An agent on ``host`` takes orders through the host's relay, on a clock ``offset_s`` ahead of the
    coordinator's."""
    return lambda name: ["--control", relay_socket_on(host), "--clock-offset", f"{offset_s:.9f}"]


class Relay:
    """One host's relay of the control channel, run over an SSH channel: closing the channel ends it."""

    def __init__(self, cl, host: str, to: str) -> None:
        self.host = host
        h = cl.hosts[host]
        cmd = (f"cd {shlex.quote(h.project_dir(str(REPO)))} && exec nice -n {AGENT_NICE} "
               f"{shlex.quote(h.python_path(str(REPO)))} -m traffic.runtime.channel relay --to {to} "
               f"--secret-file {cluster.node_dir(host)}/secret --name {shlex.quote(host)} "
               f"--unix {relay_socket_on(host)}")
        self.chan = cl.session(host).client.get_transport().open_session()
        self.chan.settimeout(RELAY_READY_S)
        self.chan.exec_command(cmd)
        try:
            line = self.chan.makefile("rb").readline().decode(errors="replace").strip()
        except (OSError, socket.timeout):
            line = ""
        if line != "ready":
            err = self.chan.makefile_stderr("rb").read(2000).decode(errors="replace").strip().splitlines()
            self.close()
            raise HostProblem(host, f"its control-channel relay did not start ({err[-1] if err else 'no output'})")

    def alive(self) -> bool:
        return not self.chan.exit_status_ready()

    def close(self) -> None:
        try:
            self.chan.shutdown_write()  # EOF on the relay's stdin: it removes its socket and exits
            self.chan.close()
        except (OSError, EOFError):
            pass


def serve_remote(cl, traffic: ServingTraffic, run_dir: Path, timeout_s: float, connections: str, offsets: dict,
                 secret: bytes, log) -> tuple[AgentsRun, ServingOutcome]:
    """``serving.run_serving`` over the hosts: the coordinator here, each host's agents behind its relay."""
    agents_dir = run_dir / "agents"
    names = [f"gpu{g}" for g in cl.where.fabric.gpus()]
    off_s = {h: offsets[h].offset_ms / 1e3 for h in cl.hosts.names}
    coord, sock = serving.start_coordinator(traffic, run_dir, names)
    srv = channel.Server(local_address(cl.hosts.first.address), secret, unix_path=str(sock), log=log)
    relays: dict[str, Relay] = {}
    fleets: dict[str, RemoteFleet] = {}
    ready_s = 0.0
    try:
        to = f"{srv.address[0]}:{srv.address[1]}"
        for h in cl.hosts.names:
            relays[h] = Relay(cl, h, to)
        t_ready = time.monotonic()
        for h in cl.hosts.names:
            mine = cl.where.gpus_on(h)
            specs = agent_specs(mine, agent_orders(h, off_s[h]), Path(agents_dir_on(h)), timeout_s, connections)
            fleets[h] = RemoteFleet(cl, h, specs, [f"gpu{g}" for g in mine])

        def check() -> None:  # (a launcher may end on its own: its agents end when the coordinator says stop)
            cl.check_alive()
            for h, r in relays.items():
                if not r.alive():
                    raise HostProblem(h, "lost during the run (its control-channel relay ended)")

        serving.wait_started(coord, run_dir, check)
        ready_s = time.monotonic() - t_ready
        log(serving.serving_log_line(len(names), ready_s, traffic, f" on {len(fleets)} hosts"))
        serving.wait_ended(coord, traffic, check)
    finally:
        exits = stop_fleets(fleets)
        for r in relays.values():
            r.close()
        coord.stop()
        srv.close()
        shutil.rmtree(sock.parent, ignore_errors=True)
    if srv.refused:
        log(f"control channel: {len(srv.refused)} connections refused (e.g. {srv.refused[0]})")
    result = serving.outcome(coord, run_dir)
    crashed, cpu = collect(cl, fleets, exits, agents_dir, {h: off_s[h] - off_s[cl.first] for h in fleets}, names)
    t0 = (coord.event("started") or {})["t0"] + off_s[cl.first]  # the coordinator's t0, on the first host's clock
    return AgentsRun(t0, agents_dir, crashed, round(ready_s, 3), round(cpu, 3)), result
