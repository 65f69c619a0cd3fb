"""Reaching the hosts of a hosts file over SSH (paramiko), in parallel, with one-line failures.

Host keys are checked (the host's ``known_hosts`` file, else ``~/.ssh/known_hosts``); an unknown
host is refused, never added silently. Every failure is a ``HostProblem`` whose message starts
with the host's name: ``up`` prints it as its one line.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from common.errors import EnvironmentProblem
from common.paths import REPO
from testbed.emulation.hosts.hostsfile import Host, Hosts

CONNECT_TIMEOUT_S = 10
SOURCE_PACKAGES = ("testbed", "controller", "traffic", "pfc", "fabrics", "common")


class HostProblem(EnvironmentProblem):
    """Something wrong with one host, named first."""

    def __init__(self, host: str, what: str) -> None:
        super().__init__(f"host {host}: {what}")
        self.host = host


@dataclass
class Result:
    rc: int
    out: str
    err: str

    @property
    def last_error(self) -> str:
        lines = (self.err or self.out).strip().splitlines()
        return lines[-1] if lines else f"exit status {self.rc}"


class Session:
    """One SSH connection to one host."""

    def __init__(self, host: Host) -> None:
        import paramiko

        self.host = host
        self.client = paramiko.SSHClient()
        try:
            if host.known_hosts:
                self.client.load_host_keys(os.path.expanduser(host.known_hosts))
            else:
                self.client.load_system_host_keys()
        except OSError as exc:
            raise HostProblem(host.name, f"cannot read known_hosts {host.known_hosts}: {exc.strerror}") from None
        self.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            self.client.connect(host.address, port=host.port, username=host.user,
                                key_filename=os.path.expanduser(host.key), timeout=CONNECT_TIMEOUT_S,
                                banner_timeout=CONNECT_TIMEOUT_S, auth_timeout=CONNECT_TIMEOUT_S,
                                allow_agent=False, look_for_keys=False)
        except paramiko.ssh_exception.SSHException as exc:
            raise HostProblem(host.name, f"SSH to {host.user}@{host.address}:{host.port} refused: {exc}") from None
        except (OSError, socket.timeout) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else (str(exc) or type(exc).__name__)
            raise HostProblem(host.name, f"cannot reach {host.address}:{host.port} over SSH: {why}") from None

    def run(self, command: str, timeout: float = 60, check: bool = False) -> Result:
        """Run a shell command there; ``check``: a failure is a HostProblem naming the command."""
        try:
            _, stdout, stderr = self.client.exec_command(command, timeout=timeout)
            out, err = stdout.read().decode(errors="replace"), stderr.read().decode(errors="replace")
            rc = stdout.channel.recv_exit_status()
        except socket.timeout:
            raise HostProblem(self.host.name, f"{command.split()[0]!r} did not finish within {timeout:g} s") from None
        except (OSError, EOFError) as exc:
            raise HostProblem(self.host.name, f"lost the SSH connection during {command.split()[0]!r}: "
                                              f"{exc or type(exc).__name__}") from None
        res = Result(rc, out, err)
        if check and rc:
            raise HostProblem(self.host.name, f"{command.split()[0]} failed: {res.last_error}")
        return res

    def close(self) -> None:
        self.client.close()


def on_all(hosts: Hosts, fn, workers: int | None = None) -> dict[str, object]:
    """``fn(host)`` for every host at once; the first failure (in hosts-file order) is raised after
    all have finished, so a slow host does not hide a broken one."""
    with ThreadPoolExecutor(max_workers=workers or len(hosts)) as pool:
        futures = {h.name: pool.submit(fn, h) for h in hosts.hosts}
    out, errors = {}, []
    for name, fut in futures.items():
        try:
            out[name] = fut.result()
        except Exception as exc:  # noqa: BLE001 - collected, the first re-raised below
            errors.append(exc)
    if errors:
        raise errors[0]
    return out


def fingerprint(root: Path = REPO) -> str:
    """A hash of this project's Python sources: two hosts run the same version when it matches
    (works on a copy without git; a version string would not change between commits)."""
    h = hashlib.sha256()
    for pkg in SOURCE_PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


FINGERPRINT_CMD = "from testbed.emulation.hosts.remote import fingerprint; print(fingerprint())"


def preflight(host: Host, local_fingerprint: str, peers: dict[str, str] | None = None, emulated_mtu: int | None = None,
              tunnel: str | None = None) -> dict:
    """What ``up --hosts`` checks on a host before anything is built: reachable as root, Open vSwitch
    answering, the same project version; with ``tunnel``, that its kernel makes such devices; with
    ``peers`` (name -> address) and ``emulated_mtu``, that the underlay towards each carries a
    tunnelled frame. Returns what it found (OVS version, kernel, cores, underlay per peer)."""
    s = Session(host)
    try:
        project = host.project_dir(str(REPO))
        py = host.python_path(str(REPO))
        who = s.run("id -u").out.strip()
        if who != "0":
            raise HostProblem(host.name, f"user {host.user} is not root there (uid {who}): the fabric needs root")
        ovs = s.run("ovs-vsctl --timeout=5 --version && ovs-vsctl --timeout=5 show")
        if ovs.rc:
            raise HostProblem(host.name, f"Open vSwitch is not running there: {ovs.last_error}")
        fp = s.run(f"cd {shlex.quote(project)} && {shlex.quote(py)} -c {shlex.quote(FINGERPRINT_CMD)}")
        if fp.rc:
            raise HostProblem(host.name, f"this project is not at {project} there ({fp.last_error})")
        if fp.out.strip() != local_fingerprint:
            raise HostProblem(host.name, f"runs another version of this project (sources {fp.out.strip()}, "
                                         f"here {local_fingerprint}): install the same checkout on every host")
        facts = s.run("uname -r; nproc; hostname").out.split()
        found = {"ovs": ovs.out.splitlines()[0].split()[-1], "kernel": facts[0] if facts else "?",
                 "cores": int(facts[1]) if len(facts) > 1 else 0, "hostname": facts[2] if len(facts) > 2 else "?"}
        if tunnel:
            _check_tunnel_kind(s, host, tunnel)
        if peers and emulated_mtu:
            found["underlay"] = _check_underlay(s, host, peers, emulated_mtu, tunnel or "vxlan")
        return found
    finally:
        s.close()


PROBE_DEV = "tbtprobe0"


def _check_tunnel_kind(s: Session, host: Host, kind: str) -> None:
    """Make and delete one tunnel device: a kernel without the driver says so here, not half way up."""
    spec = ("vxlan id 16777214 dstport 4789 local 127.0.0.1 remote 127.0.0.2" if kind == "vxlan"
            else "gretap local 127.0.0.1 remote 127.0.0.2 key 4294967294")
    res = s.run(f"ip link add {PROBE_DEV} type {spec} && ip link del {PROBE_DEV}")
    if res.rc:
        other = "gretap" if kind == "vxlan" else "vxlan"
        raise HostProblem(host.name, f"cannot make {kind} tunnels there ({res.last_error}): its kernel lacks "
                                     f"the driver; try --tunnel {other}")


def _check_underlay(s: Session, host: Host, peers: dict[str, str], emulated_mtu: int, kind: str) -> dict:
    """The device and MTU of the route to every other host, each checked against the tunnel's need."""
    import json

    from testbed.emulation.hosts import tunnels

    links = json.loads(s.run("ip -j link show", check=True).out or "[]")
    out = {}
    for name, addr in peers.items():
        if name == host.name:
            continue
        res = s.run(f"ip -j route get {shlex.quote(addr)}")
        if res.rc:
            raise HostProblem(host.name, f"no route to host {name} ({addr}): {res.last_error}")
        dev, mtu = tunnels.underlay_of(json.loads(res.out or "[]"), links)
        tunnels.check_underlay_mtu(host.name, mtu, emulated_mtu, kind, dev)
        # the MTU a device says is not what the network between passes (a VM's virtual switch, a
        # cloud's 1500): send one packet of the tunnelled size, DF set
        need = emulated_mtu + tunnels.overhead(kind)
        probe = s.run(f"ping -M do -s {need - 28} -c 2 -i 0.2 -W 2 {shlex.quote(addr)}")
        if probe.rc:
            raise HostProblem(host.name, f"packets of {need} B (emulated MTU {emulated_mtu} + {kind}) do not reach "
                                         f"host {name} ({addr}) though {dev} has MTU {mtu}: the network between "
                                         "drops them; enable jumbo frames there or lower --mtu")
        out[name] = {"dev": dev, "mtu": mtu}
    return out
