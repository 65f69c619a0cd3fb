"""What of ours exists on this machine right now, by the markers only we set: the one ownership
check that ``clean`` and ``down`` act on and that tests, the soak benchmark and a user's check
after ``clean`` read.

Ours means:

* namespaces named ``tb-gpu*``;
* root-namespace links in our link group (set by the message that makes them) or with our ifalias;
* OVS bridges and QoS rows whose external id is ours;
* processes run by root (this user), from this checkout (their working directory is the
  repository: two checkouts' fabrics are not each other's), with one of our command lines; the
  controller and the pause daemon only with exactly the arguments we start them with, on the files
  of the state directory; besides, anything inside our namespaces;
* pinned BPF maps, and machine-wide settings a fabric changes and must give back (compared with
  a baseline taken before).

A name in a state file is never enough: ``down`` removes what the file lists *and* carries the
marker, ``clean`` what carries the marker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from common import owned
from common.paths import REPO
from fabrics.datapath import ALIAS, LINK_GROUP, NETNS_PREFIX
from testbed.emulation import netns
from testbed.emulation.state import state_dir


def host_settings() -> dict:
    """Machine-wide settings a fabric changes and must give back."""
    wmem = Path("/proc/sys/net/core/wmem_default").read_text().strip()
    maxsleep = subprocess.run(["ovs-vsctl", "--if-exists", "get", "open_vswitch", ".",
                               "other_config:pmd-maxsleep"], capture_output=True, text=True).stdout.strip()
    return {"net.core.wmem_default": wmem, "ovs pmd-maxsleep": maxsleep}


# ------------------------------------------------------------------- devices
def is_our_namespace(name: str) -> bool:
    return name.startswith(NETNS_PREFIX + "gpu")


def our_namespaces() -> list[str]:
    """Named network namespaces of ours."""
    names = os.listdir(netns.NETNS_DIR) if os.path.isdir(netns.NETNS_DIR) else []
    return sorted(n for n in names if is_our_namespace(n))


def is_our_link(link) -> bool:
    """A pyroute2 link message of ours: in our link group or carrying our ifalias."""
    return link.get_attr("IFLA_GROUP") == LINK_GROUP or link.get_attr("IFLA_IFALIAS") == ALIAS


def our_links() -> dict[str, int]:
    """Root-namespace devices of ours: name -> index."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        return {link.get_attr("IFLA_IFNAME"): link["index"] for link in ipr.get_links() if is_our_link(link)}


def _ovs_rows(table: str, column: str) -> list[tuple[str, list]]:
    """(name or uuid, external_ids pairs) of every row of an OVS table ([] when OVS does not answer)."""
    proc = subprocess.run(["ovs-vsctl", "--timeout=5", "--format=json", f"--columns={column},external_ids", "list",
                           table], capture_output=True, text=True)
    if proc.returncode:
        return []
    rows = json.loads(proc.stdout)["data"]
    return [(row[0][1] if isinstance(row[0], list) else row[0], row[1][1]) for row in rows]


def our_bridges() -> list[str]:
    """OVS bridges carrying our external id."""
    return [name for name, ids in _ovs_rows("bridge", "name") if [ALIAS, "1"] in ids]


def our_qos() -> list[str]:
    """UUIDs of OVS QoS rows carrying our external id."""
    return [uuid for uuid, ids in _ovs_rows("qos", "_uuid") if [ALIAS, "1"] in ids]


# ----------------------------------------------------------------- processes
OUR_PROCESSES = {  # argv[1:3] of a process of ours -> what it is
    ("-m", "controller"): "controller", ("-m", "pfc.pfcd"): "PFC helper",
    ("-m", "traffic.runtime.launcher"): "agent launcher",  # forked agents keep its command line
    ("-m", "traffic.runtime.coordinator"): "serving coordinator",
    ("-m", "traffic.runtime.cross"): "cross-traffic flow", ("-m", "traffic.runtime.bulk"): "bulk sender",
}
CONTROLLER_CONFIG = "controller.json"


def controller_args(port: int, listen_fd: int, sdir: Path, lifeline_fd: int | None) -> list[str]:
    """The controller's arguments after the interpreter: its OpenFlow port, the listening socket it inherits,
    its config in the state directory ``sdir`` and the lifeline it watches."""
    args = ["-m", "controller", "--port", str(port), "--listen-fd", str(listen_fd), "--config",
            str(sdir / CONTROLLER_CONFIG)]
    return args + ["--lifeline-fd", str(lifeline_fd)] if lifeline_fd is not None else args


def _is_controller(argv: tuple[str, ...], sdir: Path) -> bool:
    """Exactly a command line ``controller_args`` gives for ``sdir`` (any port and fd numbers)."""
    args = list(argv[1:])
    if len(args) not in (8, 10) or not all(args[i].isdigit() for i in range(3, len(args), 2) if i != 7):
        return False
    return args == controller_args(int(args[3]), int(args[5]), sdir, int(args[9]) if len(args) == 10 else None)


def our_process(info: owned.ProcInfo, sdir: Path | None = None) -> str | None:
    """What a process of ours is (None: not ours): run by this user, from this checkout, with one of our
    command lines; the controller and the pause daemon only with exactly our arguments on the state
    directory ``sdir`` (default: this machine's)."""
    if info.zombie or not owned.same_user(info) or info.cwd != str(REPO) or len(info.argv) < 3:
        return None
    if not Path(info.argv[0]).name.startswith("python"):
        return None
    what = OUR_PROCESSES.get(tuple(info.argv[1:3]))
    sdir = state_dir() if sdir is None else sdir
    if what == "controller" and not _is_controller(info.argv, sdir):
        return None
    if what == "PFC helper":
        from pfc.launch import is_pfcd

        if not is_pfcd(info.argv, sdir):
            return None
    return what


def our_processes(sdir: Path | None = None) -> dict[int, str]:
    """Our processes now (but this one): pid -> what it is."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            info = owned.proc_info(int(entry))
            what = our_process(info, sdir) if info is not None else None
            if what:
                found[int(entry)] = what
    return found


def kill_in_namespaces(names: list[str]) -> list[int]:
    """SIGKILL every process inside the namespaces ``names`` (a process keeps a namespace alive), each through
    a pidfd opened before its namespace is checked again, so a pid reused meanwhile is never signalled."""
    wanted = {i for i in (netns.inode(n) for n in names) if i}
    killed = []
    for pid in netns.pids_in(names):
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            if os.stat(f"/proc/{pid}/ns/net").st_ino in wanted:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                killed.append(pid)
        except OSError:
            pass
        finally:
            os.close(pidfd)
    return killed


def leftovers(baseline: dict | None = None) -> list[str]:
    """Everything of ours that exists now: namespaces, aliased links, OVS rows, our processes
    (controller, pause daemon, launcher, agents, iperf3 and bulk senders in our namespaces), pinned
    BPF maps, and machine-wide settings not given back."""
    spaces = our_namespaces()
    found = [f"netns {n}" for n in spaces]
    found += [f"link {name}" for name in sorted(our_links())]
    found += [f"bridge {b}" for b in our_bridges()]
    ours = our_processes()
    in_ours = set(netns.pids_in(spaces))
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        info = owned.proc_info(pid)
        if info is None or info.zombie:
            continue
        what = ours.get(pid)
        name = Path(info.argv[0]).name if info.argv else "?"
        if what is None and pid in in_ours:
            what = f"process {name} in a testbed namespace"
        if what is None and name == "iperf3" and any(a.startswith("10.") for a in info.argv):
            what = "iperf3"
        if what:
            found.append(f"{what} pid {entry}")
    from pfc.bpfmaps import PIN_DIR
    from pfc.queue_watch import MAPS

    found += [f"pinned map {n}" for n in MAPS if os.path.exists(os.path.join(PIN_DIR, n))]
    if baseline:
        now = host_settings()
        found += [f"{k} is {now[k]!r}, was {v!r}" for k, v in baseline.items() if now.get(k) != v]
    return found
