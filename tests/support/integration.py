"""Helpers of the integration tests: what of ours exists, and the CLI as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common.paths import REPO
from testbed.emulation import inventory

BASELINE = inventory.host_settings() if os.geteuid() == 0 else {}  # as the test session found them


def leftovers() -> list[str]:
    """Everything of ours that exists now (``testbed.emulation.inventory``), against the session's baseline."""
    return inventory.leftovers(BASELINE)


def run_testbed(*args: str, timeout: float = 180, check: bool = False) -> subprocess.CompletedProcess:
    """``python -m testbed ARGS`` as a user runs it."""
    proc = subprocess.run([sys.executable, "-m", "testbed", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode:
        raise AssertionError(f"testbed {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def unreachable_pairs(f) -> list[str]:
    """Every (GPU, NIC address) pair whose UDP probes got no answer, all GPUs probing at once (``reach.py``)."""
    from fabrics import addressing
    from fabrics.datapath import netns_of

    with tempfile.TemporaryDirectory() as tmp:
        procs = {}
        for gpu in f.gpus():
            targets = [addressing.ip_of(o, p) for o in f.gpus() if o != gpu for p in (1, 2)]
            procs[gpu] = subprocess.Popen(
                ["ip", "netns", "exec", netns_of(gpu), "python3", str(Path(__file__).with_name("reach.py")),
                 f"{tmp}/ready{gpu}", f"{tmp}/go", "4", *targets], stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not all(Path(f"{tmp}/ready{g}").exists() for g in f.gpus()):
            assert time.monotonic() < deadline, "reachability probes did not start"
            time.sleep(0.05)
        Path(f"{tmp}/go").touch()
        unreachable = []
        for gpu, proc in procs.items():
            answered = set(json.loads(proc.communicate(timeout=60)[0]))
            unreachable += [f"gpu{gpu} -> {ip}" for o in f.gpus() if o != gpu for p in (1, 2)
                            if (ip := addressing.ip_of(o, p)) not in answered]
    return unreachable
