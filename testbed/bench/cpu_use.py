"""Where the CPU goes during a window: cores used by each role of a run, from /proc, no tool needed.

Roles (a process's or a thread's): ``main`` (this process), ``host`` (``traffic.runtime.host``: the
cluster and every agent), ``coordinator``, ``agents`` (the launcher's forked children), ``launcher``,
``pause daemon`` (pfc/pfcd.py), ``controller``, ``ovs pmd`` (ovs-vswitchd's PMD threads), ``ovs main``
(its main thread, which handles port status and the controller), ``ovs other`` (handlers,
revalidators, ...), ``iperf3``; machine-wide: ``softirq``, ``irq``, ``busy`` (all but idle and iowait) and
``other`` (busy that no role above accounts for). A PMD's busy polling counts as used: it is a core
nobody else gets. Softirq work done on the way out of a system call may be charged to the calling
process instead (no IRQ time accounting): read ``softirq`` as a lower bound.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

TICK = os.sysconf("SC_CLK_TCK")


def _ticks(stat_path: str) -> tuple[str, int, int] | None:
    """(comm, ppid, utime + stime) of a /proc/.../stat file; None when it is gone."""
    try:
        with open(stat_path) as fh:
            text = fh.read()
    except OSError:
        return None
    head, _, rest = text.rpartition(")")
    comm = head.partition("(")[2]
    f = rest.split()
    return comm, int(f[1]), int(f[11]) + int(f[12])


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def role_of(pid: int, comm: str, cmd: str, ppid: int, me: int, launchers: set[int]) -> str | None:
    if pid == me:
        return "main"
    if "traffic.runtime.host" in cmd:
        return "host"
    if "traffic.runtime.coordinator" in cmd:
        return "coordinator"
    if "traffic.runtime.launcher" in cmd:
        return "agents" if ppid in launchers else "launcher"
    if "pfcd" in cmd or "pfc.pfcd" in cmd:
        return "pause daemon"
    if "-m controller" in cmd or "controller/__main__" in cmd:
        return "controller"
    if comm == "iperf3":
        return "iperf3"
    return None


def _ovs_threads(pid: int) -> dict[str, int]:
    out = {"ovs pmd": 0, "ovs main": 0, "ovs other": 0}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        got = _ticks(f"/proc/{pid}/task/{tid}/stat")
        if got is None:
            continue
        comm, _, ticks = got
        role = "ovs pmd" if comm.startswith("pmd") else "ovs main" if int(tid) == pid else "ovs other"
        out[role] += ticks
    return out


def _machine() -> dict[str, int]:
    with open("/proc/stat") as fh:
        f = [int(x) for x in fh.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = f
    return {"busy": user + nice + system + irq + softirq + steal, "softirq": softirq, "irq": irq,
            "total": sum(f)}


@dataclass
class Snapshot:
    t: float
    roles: dict[str, int] = field(default_factory=dict)  # role -> ticks, summed over its processes
    per_pid: dict[tuple[int, str], int] = field(default_factory=dict)  # (pid, role) -> ticks
    machine: dict[str, int] = field(default_factory=dict)


def snapshot() -> Snapshot:
    me = os.getpid()
    snap = Snapshot(time.monotonic(), machine=_machine())
    procs = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        got = _ticks(f"/proc/{pid}/stat")
        if got is not None:
            procs[pid] = got
    cmds = {pid: _cmdline(pid) for pid, (comm, _, _) in procs.items() if comm.startswith("python")}
    forking = {pid for pid, cmd in cmds.items() if "traffic.runtime.launcher" in cmd}
    launchers = {pid for pid in forking if procs[pid][1] not in forking}  # the agents are its forked children
    for pid, (comm, ppid, ticks) in procs.items():
        if comm == "ovs-vswitchd":
            for role, t in _ovs_threads(pid).items():
                snap.roles[role] = snap.roles.get(role, 0) + t
                snap.per_pid[(pid, role)] = t
            continue
        role = role_of(pid, comm, cmds.get(pid, ""), ppid, me, launchers)
        if role is None:
            continue
        snap.roles[role] = snap.roles.get(role, 0) + ticks
        snap.per_pid[(pid, role)] = ticks
    return snap


def between(a: Snapshot, b: Snapshot) -> dict:
    """Cores each role used from ``a`` to ``b`` (processes that started or ended between count what the
    later snapshot saw of them, from their start), the machine's busy cores, softirq and the rest."""
    span = max(b.t - a.t, 1e-9)
    cores = {}
    for (pid, role), ticks in b.per_pid.items():
        cores[role] = cores.get(role, 0.0) + (ticks - a.per_pid.get((pid, role), 0)) / TICK / span
    busy = (b.machine["busy"] - a.machine["busy"]) / TICK / span
    out = {role: round(v, 3) for role, v in sorted(cores.items())}
    out["softirq"] = round((b.machine["softirq"] - a.machine["softirq"]) / TICK / span, 3)
    out["busy"] = round(busy, 3)
    out["other"] = round(max(0.0, busy - sum(cores.values()) - out["softirq"]), 3)
    out["cpus"] = os.cpu_count()
    out["span_s"] = round(span, 2)
    return out


class Window:
    """``with Window() as w: ...`` then ``w.cores``: cores per role over the block. A thread snapshots every
    ``every_s``, so a process that ends inside the block counts what it used up to its last snapshot."""

    def __init__(self, every_s: float = 0.5) -> None:
        self.every_s = every_s
        self.cores: dict = {}
        self._stop = threading.Event()

    def __enter__(self) -> "Window":
        self.start = self.last = snapshot()
        self._seen = dict(self.start.per_pid)
        self._thread = threading.Thread(target=self._run, name="cpu-window", daemon=True)
        self._thread.start()
        return self

    def _take(self) -> None:
        snap = snapshot()
        self._seen.update(snap.per_pid)
        self.last = snap

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._take()

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._take()
        end = Snapshot(self.last.t, per_pid=dict(self._seen), machine=self.last.machine)
        self.cores = between(self.start, end)


def load_line() -> str:
    """The machine's load when a figure was taken: load averages and the busiest other processes."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"load average {load} on {os.cpu_count()} CPUs"
