"""``testbed clean``: remove whatever this project left behind, and nothing else, whatever the state file
says (corrupt, missing, or in a directory others can write to): what carries our markers
(``inventory``: the one ownership check ``down`` makes too) and our processes, each checked again
through a pidfd right before it is signalled."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import tempfile
from pathlib import Path

from common import owned
from common.errors import EnvironmentProblem, TestbedError
from testbed.emulation import build, fabricctl, inventory


def clean() -> list[str]:
    """Remove whatever this project left behind, and nothing else, whatever the state file says (or if it
    is corrupt, or missing): bridges and QoS rows marked with our external id, namespaces named tb-gpu*,
    devices of our link group or with our ifalias, our processes (root's, started from this checkout with
    our command lines; the controller and pause daemon on this state directory's files), the live driver's
    socket folders that are root's and ours. A state directory others can write to is swept by the markers
    but its files are neither read nor removed, and that is one line."""
    fabricctl.require_root()
    try:
        sdir = fabricctl.require_state_dir()
    except EnvironmentProblem as exc:
        unsafe, sdir = exc, None
    else:
        unsafe = None
    st = None
    if sdir is not None:
        with contextlib.suppress(TestbedError):  # a corrupt state says nothing; the markers below decide
            st = fabricctl.load_state()
    if st is not None:
        fabricctl._stop_pfc(st)
        fabricctl._stop_controller_process(st)
    fabricctl._restore_ovs_tuning(st.ovs_restore if st is not None else None)  # OVS's own row knows, whatever the file
    removed = _stop_our_processes()
    removed += _remove_socket_folders()
    if subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True).returncode == 0:
        removed += _remove_ovs_rows()
    removed += _remove_namespaces()
    removed += _remove_links()
    from pfc import queue_watch

    removed += [f"pinned BPF map {p}" for p in queue_watch.remove_pins()]
    fabricctl._drop_lifeline()
    if unsafe is not None:
        raise EnvironmentProblem(f"removed {len(removed)} items by their markers, but did not touch the state "
                                 f"files: {unsafe}")
    fabricctl.state_file().unlink(missing_ok=True)
    return removed


def _stop_our_processes() -> list[str]:
    """Stop the controllers, pause daemons, agent launchers and coordinators an earlier fabric left: each
    checked again (through a pidfd) right before it is signalled."""
    removed = []
    sdir = fabricctl.state_dir()
    for pid, what in inventory.our_processes(sdir).items():
        if owned.stop(pid, None, lambda info, w=what: inventory.our_process(info, sdir) == w) == "stopped":
            removed.append(f"{what} process {pid}")
    return removed


SOCKET_FOLDER_PREFIX = "tb-serving-"  # testbed.repetition.drivers.live makes them (mkdtemp: root's, mode 700)
SOCKET_NAME = "control.sock"


def _our_socket_folder(path: Path) -> bool:
    """A live driver's control socket folder: a real directory (not a link), root's, mode 700, holding
    nothing but its control socket."""
    try:
        st = os.lstat(path)
        entries = os.listdir(path)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) != 0o700:
        return False
    if entries not in ([], [SOCKET_NAME]):
        return False
    return not entries or stat.S_ISSOCK(os.lstat(path / SOCKET_NAME).st_mode)


def _remove_socket_folders() -> list[str]:
    """The live driver's control socket folders that are ours; anyone else's /tmp/tb-serving-* stays."""
    removed = []
    for sock_dir in Path(tempfile.gettempdir()).glob(SOCKET_FOLDER_PREFIX + "*"):
        if _our_socket_folder(sock_dir):
            try:
                (sock_dir / SOCKET_NAME).unlink(missing_ok=True)
                sock_dir.rmdir()
            except OSError:
                continue
            removed.append(f"control socket folder {sock_dir}")
    return removed


def _remove_ovs_rows() -> list[str]:
    """OVS bridges (in one transaction) and QoS rows that carry our external id."""
    removed = []
    ours = inventory.our_bridges()
    if ours:
        cmd = ["ovs-vsctl", "--timeout=60"]
        for br in ours:
            cmd += ["--", "--if-exists", "del-br", br]
        build.run(cmd)
        removed += [f"OVS bridge {b}" for b in ours]
    for uuid in inventory.our_qos():
        subprocess.run(["ovs-vsctl", "--if-exists", "destroy", "qos", uuid], capture_output=True)
        removed.append(f"OVS QoS {uuid[:8]}")
    return removed


def _remove_namespaces() -> list[str]:
    """Our GPU namespaces, after killing what runs inside (a process keeps a namespace alive)."""
    spaces = inventory.our_namespaces()
    removed = [f"process {pid} in a testbed namespace" for pid in inventory.kill_in_namespaces(spaces)]
    if spaces:
        subprocess.run(["ip", "-force", "-batch", "-"], input="".join(f"netns delete {n}\n" for n in spaces),
                       text=True, capture_output=True)
        removed += [f"netns {n}" for n in spaces]
    return removed


def _remove_links() -> list[str]:
    """Root-namespace devices of ours (a veth's twin may go with it first)."""
    from pyroute2 import IPRoute

    removed = []
    ipr = IPRoute()
    try:
        for link in ipr.get_links():
            if inventory.is_our_link(link):
                try:
                    ipr.link("del", index=link["index"])
                    removed.append(f"link {link.get_attr('IFLA_IFNAME')}")
                except Exception:
                    pass
    finally:
        ipr.close()
    return removed
