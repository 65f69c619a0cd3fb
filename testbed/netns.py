"""Named network namespaces, entered in-process (setns), no process per step."""

from __future__ import annotations

import contextlib
import ctypes
import os

NETNS_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


@contextlib.contextmanager
def inside(name: str):
    """Run the block inside netns ``name`` (this thread), then come back."""
    root = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(os.path.join(NETNS_DIR, name), os.O_RDONLY)
    try:
        _setns(target)
        yield
    finally:
        _setns(root)
        os.close(target)
        os.close(root)


def exists(name: str) -> bool:
    return os.path.exists(os.path.join(NETNS_DIR, name))


def inode(name: str) -> int | None:
    try:
        return os.stat(os.path.join(NETNS_DIR, name)).st_ino
    except OSError:
        return None


def pids_in(names: list[str]) -> list[int]:
    """PIDs of processes whose network namespace is one of ``names``."""
    wanted = {i for i in (inode(n) for n in names) if i}
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/net").st_ino in wanted:
                out.append(int(entry))
        except OSError:
            continue
    return out
