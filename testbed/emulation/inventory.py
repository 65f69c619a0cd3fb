"""What of ours exists on this machine right now: the one list that tests, the soak
benchmark and a user's check after ``clean`` all read.

Ours means: namespaces ``tb-gpu*``, links with our ifalias, OVS bridges with our
external id, our processes (controller, PFC pause daemon, agent launcher, agents,
cross-traffic and bulk senders, anything else inside our namespaces, iperf3 on
fabric addresses), pinned BPF maps, and machine-wide settings a fabric changes
and must give back (compared with a baseline taken before).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from testbed.emulation import netns
from testbed.emulation.datapath import ALIAS, NETNS_PREFIX


def host_settings() -> dict:
    """Machine-wide settings a fabric changes and must give back."""
    wmem = Path("/proc/sys/net/core/wmem_default").read_text().strip()
    maxsleep = subprocess.run(["ovs-vsctl", "--if-exists", "get", "open_vswitch", ".",
                               "other_config:pmd-maxsleep"], capture_output=True, text=True).stdout.strip()
    return {"net.core.wmem_default": wmem, "ovs pmd-maxsleep": maxsleep}


OUR_PROCESSES = {  # argv[1:3] of a process of ours -> what it is
    (b"-m", b"controller"): "controller", (b"-m", b"pfc.pfcd"): "PFC helper",
    (b"-m", b"traffic.runtime.launcher"): "agent launcher",  # forked agents keep its command line
    (b"-m", b"traffic.runtime.coordinator"): "serving coordinator",
    (b"-m", b"traffic.runtime.cross"): "cross-traffic flow", (b"-m", b"traffic.runtime.bulk"): "bulk sender",
}


def leftovers(baseline: dict | None = None) -> list[str]:
    """Everything of ours that exists now: namespaces, aliased links, OVS rows, our processes
    (controller, pause daemon, launcher, agents, iperf3 and bulk senders in our namespaces), pinned
    BPF maps, and machine-wide settings not given back."""
    spaces = [n for n in (os.listdir("/run/netns") if os.path.isdir("/run/netns") else [])
              if n.startswith(NETNS_PREFIX + "gpu")]
    found = [f"netns {n}" for n in spaces]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found += [f"link {line.split(':')[1].strip().split('@')[0]}" for line in links.splitlines()
              if f"alias {ALIAS}" in line]
    out = subprocess.run(["ovs-vsctl", "--format=json", "--columns=name,external_ids", "list", "bridge"],
                         capture_output=True, text=True).stdout
    found += [f"bridge {row[0]}" for row in json.loads(out)["data"] if [ALIAS, "1"] in row[1][1]]
    in_ours = set(netns.pids_in(spaces))
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                state = Path(f"/proc/{entry}/stat").read_text().split(")")[-1].split()[0]
            except OSError:
                continue
            if state == "Z":
                continue
            what = OUR_PROCESSES.get(tuple(cmd[1:3]))
            if what is None and int(entry) in in_ours:
                what = f"process {Path(cmd[0].decode(errors='replace')).name} in a testbed namespace"
            if what is None and Path(cmd[0].decode(errors="replace")).name == "iperf3" and \
                    any(a.startswith(b"10.") for a in cmd):
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
