"""What Open vSwitch itself does between a carrier loss and the data plane's move, for ``bench failover``.

* ``PortStatusMonitor``: one ``ovs-ofctl --timestamp monitor`` per bridge (a second OpenFlow connection through
  the bridge's management socket, beside the controller's) records when each OFPT_PORT_STATUS left the switch:
  OVS's main thread noticed the carrier loss (netdev-linux's link notification), marked the port down and
  told its connections, in the same pass as it asks its revalidators to re-translate the cached datapath
  flows, which is when a group bucket watching the port stops being live in the datapath. The stamp is
  ovs-ofctl's receive time (wall clock, ms): an upper bound on when the main thread sent it.
* ``realtime``: opt-in (``TESTBED_OVS_REALTIME=1``) SCHED_RR for ovs-vswitchd's main, revalidator and handler
  threads for the benchmark's run (the PMD threads too with ``=all``; a PMD busy-polls, so at real-time priority
  it keeps its core from everything else but the kernel's real-time throttling), put back afterwards.

The pure parts (``parse_port_status``, ``status_after``, ``threads_to_raise``) are what the tests hold.
"""

from __future__ import annotations

import calendar
import os
import re
import subprocess
import time
from pathlib import Path

_HEADER = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\.(\d{3}): OFPT_PORT_STATUS"
                     r".*?: (ADD|DEL|MOD): (\d+)\(([^)]*)\)")
_STATE = re.compile(r"^\s*state:\s*(.*)$")
RT_PRIORITY = 5
ENV = "TESTBED_OVS_REALTIME"


def parse_port_status(text: str) -> list[dict]:
    """Port-status messages of one ``ovs-ofctl --timestamp monitor`` output (its timestamps are UTC with ms):
    wall_s, port, name, reason and ``down``: a deleted port, or a state without LIVE (OVS reports a port
    that lost carrier first as no longer live, the liveness a fast-failover bucket watches, then as
    LINK_DOWN)."""
    out: list[dict] = []
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            wall = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1e3
            out.append({"wall_s": wall, "reason": m.group(3), "port": int(m.group(4)), "name": m.group(5),
                        "down": m.group(3) == "DEL"})
            continue
        s = _STATE.match(line)
        if s and out and "state_seen" not in out[-1]:
            out[-1]["state_seen"] = True
            flags = s.group(1).split()
            out[-1]["down"] = out[-1]["down"] or "LINK_DOWN" in flags or "LIVE" not in flags
    for ev in out:
        ev.pop("state_seen", None)
    return out


def status_after(events: list[dict], port: int, cut_wall_s: float, until_wall_s: float) -> float | None:
    """ms from the cut to the first port-status that reported ``port`` down after it (None: none did)."""
    times = [e["wall_s"] for e in events if e["port"] == port and e["down"] and cut_wall_s - 0.002 <= e["wall_s"]
             < until_wall_s]
    return round(max(0.0, min(times) - cut_wall_s) * 1e3, 1) if times else None


class PortStatusMonitor:
    """``ovs-ofctl --timestamp monitor`` on every bridge, into files in ``workdir``; ``events()`` parses them."""

    def __init__(self, bridges: list[str], workdir: Path) -> None:
        self.files = {br: workdir / f"portstatus-{br}.txt" for br in bridges}
        self.procs = {}
        for br, path in self.files.items():
            with open(path, "wb") as out:
                # a service connection gets no asynchronous message until it sets a miss_send_len (connmgr.c);
                # line-buffered, so stopping it loses no line
                self.procs[br] = subprocess.Popen(["stdbuf", "-oL", "ovs-ofctl", "-O", "OpenFlow13", "--timestamp",
                                                   "monitor", br, "128"],
                                                  stdout=out, stderr=subprocess.STDOUT)

    def raw(self) -> dict[str, str]:
        """What each monitor printed (kept with the benchmark's logs)."""
        return {br: path.read_text(errors="replace")[-20000:] if path.exists() else ""
                for br, path in self.files.items()}

    def events(self) -> dict[str, list[dict]]:
        return {br: parse_port_status(path.read_text(errors="replace")) if path.exists() else []
                for br, path in self.files.items()}

    def close(self) -> None:
        """Stop the monitors and remove their files."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for path in self.files.values():
            path.unlink(missing_ok=True)


# ------------------------------------------------------------------ real-time scheduling (opt-in)
def threads_to_raise(names: dict[int, str], mode: str) -> list[int]:
    """Thread ids of ovs-vswitchd to raise: ``mode`` "1" the main thread (named ovs-vswitchd), revalidators and
    handlers; "all" every thread, the PMDs too; anything else none."""
    if mode not in ("1", "all"):
        return []
    keep = ("ovs-vswitchd", "revalidator", "handler")
    return sorted(tid for tid, name in names.items() if mode == "all" or name.startswith(keep))


def _ovs_threads() -> dict[int, str]:
    pid = Path("/run/openvswitch/ovs-vswitchd.pid").read_text().strip()
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(task.name)] = (task / "comm").read_text().strip()
        except OSError:
            continue
    return out


def realtime(log=print) -> list[int]:
    """Raise ovs-vswitchd's threads as ``TESTBED_OVS_REALTIME`` asks (nothing when unset); the ids raised."""
    mode = os.environ.get(ENV, "")
    try:
        tids = threads_to_raise(_ovs_threads(), mode)
    except OSError:
        return []
    raised = []
    for tid in tids:
        try:
            os.sched_setscheduler(tid, os.SCHED_RR, os.sched_param(RT_PRIORITY))
            raised.append(tid)
        except OSError:
            continue
    if raised:
        log(f"ovs-vswitchd: {len(raised)} threads at SCHED_RR {RT_PRIORITY} ({ENV}={mode})")
    return raised


def unrealtime(tids: list[int]) -> None:
    """Put the raised threads back to SCHED_OTHER."""
    for tid in tids:
        try:
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
        except OSError:
            continue
