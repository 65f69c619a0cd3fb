"""Which CPUs Open vSwitch's PMD threads are pinned to, and the ones left for the processes that decide
lateness (``traffic.runtime.host`` is pinned there: at SCHED_FIFO on a PMD's core it would stop the PMD, and
with it the fabric, for as long as it runs)."""

from __future__ import annotations

import os


def _cpu_list(text: str) -> set[int]:
    """'0-1,3' -> {0, 1, 3}."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def pmd_cpus(proc: str = "/proc") -> set[int]:
    """The CPUs ovs-vswitchd's PMD threads may run on (empty: no PMD, or OVS not running)."""
    cpus: set[int] = set()
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/comm") as fh:
                if fh.read().strip() != "ovs-vswitchd":
                    continue
            tasks = os.listdir(f"{proc}/{entry}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"{proc}/{entry}/task/{tid}/comm") as fh:
                    if not fh.read().startswith("pmd"):
                        continue
                with open(f"{proc}/{entry}/task/{tid}/status") as fh:
                    for line in fh:
                        if line.startswith("Cpus_allowed_list:"):
                            cpus |= _cpu_list(line.split(":", 1)[1])
            except OSError:
                continue
    return cpus


def lateness_cpus(proc: str = "/proc") -> list[int]:
    """The CPUs this process may use minus the PMDs' (all of them when that would leave none)."""
    mine = os.sched_getaffinity(0)
    left = mine - pmd_cpus(proc)
    return sorted(left or mine)
