"""A fabric over the hosts of a hosts file: checks, bring-up, teardown and clean, driven over SSH.

``up`` does everything that can fail without touching a host first (fabric, plan, placement, each
host's part, PFC thresholds), then ``remote.preflight`` on every host in parallel (reachable as root,
Open vSwitch answering, the same project sources, the tunnel driver, the underlay MTU towards every
peer): any failure is one line naming the host, and nothing is built anywhere. Then:

1. the first host starts the controller, bound to its underlay address (``node controller``);
2. every host builds its part in parallel (``node build``: tunnels, the one-host build, its pause daemon);
3. the first host waits until the controller verified every switch and cable (``node wait``);
4. every host makes its first send (``node finish``).

A failure at any step takes every host's part down again before the error propagates. The node spec
and the run's secret go to ``NODE_DIR`` on each host over SFTP (mode 0600, never on a command line).
"""

from __future__ import annotations

import json
import posixpath
import shlex
import time
from dataclasses import asdict, dataclass, field

from common.errors import EnvironmentProblem, TestbedError
from common.paths import REPO
from fabrics import build_fabric
from fabrics.datapath import DatapathConfig, plan_datapath
from testbed.emulation.hosts import assign, hostsfile, remote, tunnels
from testbed.emulation.hosts.hostsfile import Hosts
from testbed.emulation.hosts.remote import HostProblem, Session

NODE_DIR = "/run/testbed-hosts"


def node_dir(host: str) -> str:
    """This run's files on ``host`` (a folder per host name: pseudo-hosts share the machine's /run)."""
    return f"{NODE_DIR}/{host}"
NODE_MODULE = "testbed.emulation.hosts.node"


def node_spec(fabric_args: dict, config: DatapathConfig, pfc, hosts: Hosts, host: str, controller_port: int,
              tunnel: str) -> dict:
    """What ``node`` needs on ``host`` (JSON-able): the same on every host but for ``host``."""
    from testbed.emulation.fabricctl import _fabric_kwargs

    fabric = build_fabric(**fabric_args)
    return {"fabric": {"kind": fabric.kind, **_fabric_kwargs(fabric)},
            "datapath": asdict(config), "pfc": asdict(pfc) if pfc is not None else {"enabled": False},
            "hosts": hosts.names, "addresses": {h.name: h.address for h in hosts.hosts}, "host": host,
            "controller": {"host": hosts.first.address, "port": controller_port}, "tunnel": tunnel,
            "anchor_port": 1}


def check_plan(fabric_args: dict, config: DatapathConfig, hosts: Hosts, tunnel: str) -> assign.HostAssignment:
    """Everything that can fail before a host is touched: the fabric, its plan, the placement, each part."""
    fabric = build_fabric(**fabric_args)
    plan = plan_datapath(fabric, config)
    where = assign.assign(fabric, hosts.names)
    tunnels.overhead(tunnel)
    for h in hosts.names:
        tunnels.split(plan, where, h)
    return where


@dataclass
class Cluster:
    """A fabric that is up on several hosts, with one SSH session per host."""

    hosts: Hosts
    where: assign.HostAssignment
    specs: dict[str, dict]
    sessions: dict[str, Session] = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    built: list[str] = field(default_factory=list)
    lost: str | None = None

    @property
    def first(self) -> str:
        return self.hosts.names[0]

    def session(self, name: str) -> Session:
        return self.sessions[name]

    def node(self, name: str, action: str, timeout: float = 180, spec: bool = True):
        """Run a node action on one host; its JSON answer, or a HostProblem with its one line."""
        h = self.hosts[name]
        py, project = h.python_path(str(REPO)), h.project_dir(str(REPO))
        cmd = f"cd {shlex.quote(project)} && {shlex.quote(py)} -m {NODE_MODULE} {action}"
        if spec:
            cmd += f" --spec {node_dir(name)}/spec.json"
        res = self.sessions[name].run(cmd, timeout=timeout)
        if res.rc:
            raise HostProblem(name, f"{action} failed: {res.last_error}")
        try:
            return json.loads(res.out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise HostProblem(name, f"{action} answered no JSON: {res.out.strip()[-200:]}") from None

    def on_all(self, fn, names: list[str] | None = None) -> dict:
        from concurrent.futures import ThreadPoolExecutor

        names = names or self.hosts.names
        with ThreadPoolExecutor(max_workers=len(names)) as pool:
            futs = {n: pool.submit(fn, n) for n in names}
        out, errors = {}, []
        for n, f in futs.items():
            try:
                out[n] = f.result()
            except Exception as exc:  # noqa: BLE001 - the first re-raised, in hosts-file order
                errors.append(exc)
        if errors:
            raise errors[0]
        return out

    def upload(self, name: str, rel: str, text: str) -> str:
        """Write ``text`` to the host's node folder/``rel`` (mode 0600); its path there."""
        path = posixpath.join(node_dir(name), rel)
        sftp = self.sessions[name].client.open_sftp()
        try:
            _makedirs(sftp, posixpath.dirname(path))
            with sftp.open(path, "w") as fh:
                fh.write(text)
            sftp.chmod(path, 0o600)
        finally:
            sftp.close()
        return path

    def check_alive(self) -> None:
        """Raise the one line of a host whose SSH connection is gone (a host lost mid-run)."""
        for name, s in self.sessions.items():
            t = s.client.get_transport()
            if t is None or not t.is_active():
                self.lost = self.lost or name
                raise HostProblem(name, f"lost during the run (SSH connection to {self.hosts[name].address} closed)")

    def queues(self) -> list[dict]:
        rows = self.on_all(lambda n: self.node(n, "queues", timeout=60, spec=False))
        return [r for n in self.hosts.names for r in rows[n]]

    def pfc(self) -> dict:
        return self.on_all(lambda n: self.node(n, "pfc", timeout=60, spec=False))

    def down(self, log=print) -> list[str]:
        """Every host's part down (a lost host is named, not waited for); sessions closed. Returns problems."""
        problems = []

        def one(n):
            try:
                self.check_alive_one(n)
                self.node(n, "down", timeout=180, spec=False)
                self.sessions[n].run(f"rm -rf {node_dir(n)}; rmdir {NODE_DIR} 2>/dev/null; true", timeout=30)
            except Exception as exc:  # noqa: BLE001 - collected
                problems.append(str(exc))

        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(self.sessions) or 1) as pool:
            list(pool.map(one, list(self.sessions)))
        for s in self.sessions.values():
            s.close()
        self.sessions.clear()
        for p in problems:
            log(f"down: {p}")
        return problems

    def check_alive_one(self, name: str) -> None:
        t = self.sessions[name].client.get_transport()
        if t is None or not t.is_active():
            raise HostProblem(name, "unreachable, its part was not taken down ('testbed clean --hosts' later)")


def _makedirs(sftp, path: str) -> None:
    parts, cur = path.strip("/").split("/"), ""
    for p in parts:
        cur += "/" + p
        try:
            sftp.stat(cur)
        except OSError:
            sftp.mkdir(cur, 0o700)


def preflight_all(hosts: Hosts, mtu: int, tunnel: str) -> dict:
    """``remote.preflight`` on every host at once; the first refusal (hosts-file order) as one line."""
    local = remote.fingerprint()
    peers = {h.name: h.address for h in hosts.hosts} if len(hosts) > 1 else None
    # reachability first: an unreachable host is named as such, not as its peers' failed underlay probe
    remote.on_all(hosts, lambda h: remote.Session(h).close())
    try:
        return remote.on_all(hosts, lambda h: remote.preflight(h, local, peers, mtu, tunnel if peers else None))
    except EnvironmentProblem:
        raise
    except TestbedError as exc:  # e.g. the underlay MTU: a refusal of the environment, exit 1 like the others
        raise EnvironmentProblem(str(exc)) from None


def up(hosts_file: str, fabric_args: dict, config: DatapathConfig, pfc=None, tunnel: str = tunnels.DEFAULT_KIND,
       log=print) -> Cluster:
    """Bring the fabric up over the hosts of ``hosts_file``; refusals before anything is built."""
    hosts = hostsfile.load(hosts_file)
    where = check_plan(fabric_args, config, hosts, tunnel)
    t0 = time.monotonic()
    preflight_all(hosts, config.mtu, tunnel)
    specs = {h: node_spec(fabric_args, config, pfc, hosts, h, 0, tunnel) for h in hosts.names}
    cl = Cluster(hosts, where, specs)
    cl.timings["preflight_s"] = round(time.monotonic() - t0, 3)
    try:
        for h in hosts.hosts:
            cl.sessions[h.name] = Session(h)
        first = cl.first
        cl.upload(first, "spec.json", json.dumps(specs[first]))
        cl.built.append(first)
        port = cl.node(first, "controller")["port"]
        for spec in specs.values():
            spec["controller"]["port"] = port
        cl.on_all(lambda n: cl.upload(n, "spec.json", json.dumps(specs[n])))
        cl.built = list(hosts.names)
        t = time.monotonic()
        built = cl.on_all(lambda n: cl.node(n, "build", timeout=300))
        cl.timings["build_s"] = round(time.monotonic() - t, 3)
        t = time.monotonic()
        ready = cl.node(first, "wait", timeout=120)
        cl.timings["controller_ready_s"] = round(time.monotonic() - t, 3)
        cl.on_all(lambda n: cl.node(n, "finish", timeout=60))
        cl.timings["up_s"] = round(time.monotonic() - t0, 3)
        log(f"fabric up on {len(hosts)} hosts in {cl.timings['up_s']:.1f} s: "
            + ", ".join(f"{n} {b['switches']} switches {b['gpus']} GPUs {b['tunnels']} tunnels"
                        for n, b in built.items())
            + f"; controller on {hosts.first.address}:{port} verified {ready['switches']} switches, "
              f"{ready['cabling']['confirmed']} cables")
    except BaseException:
        import os

        if os.environ.get("TESTBED_KEEP_ON_FAILURE"):
            log("up failed: TESTBED_KEEP_ON_FAILURE is set, leaving it ('testbed clean --hosts FILE' removes it)")
            raise
        log("up failed: taking every host's part down")
        cl.down(log)
        raise
    return cl


def clean(hosts_file: str, log=print) -> dict[str, str]:
    """``testbed clean`` on every host that answers (also after a kill), and the node files; host -> result."""
    hosts = hostsfile.load(hosts_file)
    out: dict[str, str] = {}

    def one(h):
        try:
            s = Session(h)
        except HostProblem as exc:
            return str(exc)
        try:
            py, project = h.python_path(str(REPO)), h.project_dir(str(REPO))
            s.run(f"cd {shlex.quote(project)} && {shlex.quote(py)} -m {NODE_MODULE} down", timeout=180)
            res = s.run(f"cd {shlex.quote(project)} && {shlex.quote(py)} -m testbed clean", timeout=180)
            s.run(f"rm -rf {node_dir(h.name)}; rmdir {NODE_DIR} 2>/dev/null; true", timeout=30)
            return "clean" if res.rc == 0 else f"clean failed: {res.last_error}"
        finally:
            s.close()

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
        results = list(pool.map(one, hosts.hosts))
    for h, r in zip(hosts.hosts, results):
        out[h.name] = r
        log(f"{h.name}: {r}")
    return out


def down(hosts_file: str, log=print) -> dict[str, str]:
    """``down --hosts``: every host's part down (the node's down, then clean sweeps what is left)."""
    return clean(hosts_file, log)


def merge_pfc(per_host: dict[str, dict]) -> tuple[list[str], list[str], dict]:
    """(pause log lines, latency lines, summed status) from every host's ``node pfc``."""
    lines, lat, status = [], [], {"pauses": 0, "resumes": 0}
    for doc in per_host.values():
        lines += doc.get("log", [])
        lat += doc.get("latency", [])
        st = doc.get("status") or {}
        for k in ("pauses", "resumes"):
            status[k] += int(st.get(k) or 0)
    return lines, lat, status


def refuse_no_hosts(hosts_file: str | None) -> None:
    if not hosts_file:
        raise TestbedError("--hosts FILE is required")
