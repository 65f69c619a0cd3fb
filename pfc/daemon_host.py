"""The pause daemon's process around its fast loop: the thread that writes its status and logs, and what
keeps the loop on time on a shared machine (real-time scheduling, a core away from OVS's PMD thread, idle
CPUs polling instead of halting, the garbage collector kept out of the way)."""

from __future__ import annotations

import gc
import json
import os
import queue
import threading
import time

from common import owned


class Writer(threading.Thread):
    """Writes the status JSON and appends the logs, off the fast loop: on a disk
    /run, ext4 flushes a file renamed over another at once, which can block for
    hundreds of milliseconds (blocking I/O releases the GIL, so the loop runs on)."""

    def __init__(self, policy: dict) -> None:
        super().__init__(name="pfcd-writer", daemon=True)
        self.status_path = policy["status"]
        self.log_dir = os.path.dirname(policy["log"])
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()

    def put(self, doc: dict, logs: dict[str, list[str]]) -> None:
        """The status, and for each log file (by name) the lines to append."""
        self.inbox.put((doc, logs))

    def run(self) -> None:
        """Until ``close``: each status replaces the file, each log line is appended."""
        # real-time too, one step below the loop: a normal thread descheduled while it
        # holds the GIL keeps the loop waiting for the GIL (gaps of 10+ ms)
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(5))
        except (OSError, AttributeError):
            pass
        files = {}
        try:
            while True:
                item = self.inbox.get()
                if item is None:
                    return
                doc, logs = item
                for name, lines in logs.items():
                    if name not in files:
                        files[name] = owned.open_private(os.path.join(self.log_dir, name), "a")
                    files[name].writelines(lines)
                    files[name].flush()
                owned.write_private(self.status_path, json.dumps(doc))
        finally:
            for fh in files.values():
                fh.close()

    def close(self) -> None:
        """Write what is queued, then stop (waits up to 10 s)."""
        self.inbox.put(None)
        self.join(timeout=10)


def away_from_pmd() -> str:
    """Run the loop on a core OVS's PMD thread does not poll: a FIFO thread
    sharing the PMD's core waits behind its long kernel sends (loop gaps of
    10-20 ms). Nothing changes on a one-core machine or if OVS does not say."""
    import re
    import subprocess

    try:
        out = subprocess.run(["ovs-appctl", "dpif-netdev/pmd-rxq-show"], capture_output=True, text=True,
                             timeout=5).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "any core"
    pmd = {int(c) for c in re.findall(r"core_id (\d+)", out)}
    free = os.sched_getaffinity(0) - pmd
    if not pmd or not free:
        return "any core"
    os.sched_setaffinity(0, free)
    return f"cores {','.join(map(str, sorted(free)))} (PMD on {','.join(map(str, sorted(pmd)))})"


def no_idle_halt() -> tuple[int | None, str]:
    """Ask the kernel (PM QoS, /dev/cpu_dma_latency = 0 us) to poll instead of
    halting idle CPUs, for as long as the returned fd stays open. In a VM a
    halted vCPU is woken by the host, and that wake-up is the daemon's worst
    lateness: a 200 us sleep oversleeps by p99.9 2.1 ms / max 6.9 ms on an
    idle machine with halting, p99.9 0.14 ms with polling. The cost is host
    CPU for the idle vCPU time while the daemon runs; the kernel drops the
    request when the process exits, however it exits."""
    import struct

    try:
        fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
        os.write(fd, struct.pack("i", 0))
    except OSError as e:
        return None, f"idle CPUs may halt ({e.strerror})"
    return fd, "idle CPUs poll"


def quiet_gc(daemon) -> None:
    """Python's full garbage collection scans every container object: ~7 ms
    for the ~23k this process holds after start-up, more on a busy CPU, with
    the GIL held whichever thread runs it. Everything built so far lives as
    long as the daemon, so it is frozen out of the scan; collections that
    still take over 2 ms are logged as "gc" hold-ups."""
    gc.collect()
    gc.freeze()
    started = [0.0]

    def timed(phase, info):
        if phase == "start":
            started[0] = time.monotonic()
        elif started[0]:
            daemon.gaps.note("gc", time.monotonic() - started[0])

    gc.callbacks.append(timed)


def realtime() -> str:
    """SCHED_FIFO so the loop wakes on time next to a busy-polling OVS; nice -15 if refused."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        return "fifo"
    except (OSError, AttributeError):
        try:
            os.nice(-15)
        except OSError:
            pass
        return "nice"
