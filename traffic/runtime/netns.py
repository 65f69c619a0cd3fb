"""Entering a named network namespace in-process (setns(2)): the project's one way in.

A socket stays in the namespace it was created in, so one process can hold sockets in every
emulated GPU (enter, create, come back); a forked agent enters its GPU's namespace once for good.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

NETNS_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def _setns(fd: int, what: str) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns into {what}: {os.strerror(err)}")


def enter(name: str) -> None:
    """Move this thread into netns ``name`` for good (a forked agent does this once)."""
    fd = os.open(os.path.join(NETNS_DIR, name), os.O_RDONLY)
    try:
        _setns(fd, name)
    finally:
        os.close(fd)


@contextlib.contextmanager
def inside(name: str):
    """Run the block inside netns ``name`` (this thread), then come back."""
    root = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(os.path.join(NETNS_DIR, name), os.O_RDONLY)
    try:
        _setns(target, name)
        yield
    finally:
        _setns(root, "the root namespace")
        os.close(target)
        os.close(root)
