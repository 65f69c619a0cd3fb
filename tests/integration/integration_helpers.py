"""Helpers of the integration tests: what of ours exists, and the CLI as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from testbed.emulation import inventory

REPO = Path(__file__).resolve().parents[2]


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
