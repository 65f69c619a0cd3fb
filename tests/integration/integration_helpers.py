"""Helpers of the integration tests: what of ours exists, and the CLI as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def leftovers() -> list[str]:
    """Everything of ours that exists now: namespaces, aliased links, OVS rows, controllers."""
    from testbed.emulation.plan import ALIAS, NETNS_PREFIX

    found = [f"netns {n}" for n in (os.listdir("/run/netns") if os.path.isdir("/run/netns") else [])
             if n.startswith(NETNS_PREFIX + "gpu")]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found += [f"link {line.split(':')[1].strip().split('@')[0]}" for line in links.splitlines()
              if f"alias {ALIAS}" in line]
    out = subprocess.run(["ovs-vsctl", "--format=json", "--columns=name,external_ids", "list", "bridge"],
                         capture_output=True, text=True).stdout
    found += [f"bridge {row[0]}" for row in json.loads(out)["data"] if [ALIAS, "1"] in row[1][1]]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd[1:3] == [b"-m", b"controller"]:
                found.append(f"controller pid {entry}")
            if cmd[1:3] == [b"-m", b"controller.pfc.pfcd"]:
                found.append(f"PFC helper pid {entry}")
    from controller.pfc.attach import MAPS
    from controller.pfc.bpfmaps import PIN_DIR

    found += [f"pinned map {n}" for n in MAPS if os.path.exists(os.path.join(PIN_DIR, n))]
    return found


def run_testbed(*args: str, timeout: float = 180, check: bool = False) -> subprocess.CompletedProcess:
    """``python -m testbed ARGS`` as a user runs it."""
    proc = subprocess.run([sys.executable, "-m", "testbed", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode:
        raise AssertionError(f"testbed {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc
