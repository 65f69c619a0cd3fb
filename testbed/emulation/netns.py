"""Named network namespaces seen from the root side: which exist, and which processes live in them.

Entering one is ``traffic.runtime.netns`` (the one setns).
"""

from __future__ import annotations

import os

from traffic.runtime.netns import NETNS_DIR, inside  # noqa: F401 (inside: the callers' way in)


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
