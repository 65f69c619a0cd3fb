"""Where the project's own files are: the repository, the shipped data, run outputs.

The bottom layer: imports nothing from the project, so anything may import it.
Everything here is inside the repository (a clone needs nothing beside it);
the traces are the unmodified public files in ``data/traces/`` (see its README).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = REPO / "data"
TRACES_DIR = DATA_DIR / "traces"
DEFAULT_TRACE = TRACES_DIR / "mooncake_conversation.jsonl.gz"
AZURE_TRACE = TRACES_DIR / "azure2023_conv.csv.gz"
REPORTS = REPO / "reports"
# the running fabric's files (one fabric per machine), when $TESTBED_STATE_DIR does not name another folder:
# testbed.emulation.state reads it, and testbed/mininet_topos.py (under `mn`, the standard library alone)
DEFAULT_STATE_DIR = "/run/zcube-testbed"


def shown(path: str | Path) -> str:
    """A path as a user is shown it: relative to the repository root when it is inside it (the same in every
    clone), else as given."""
    p = Path(path)
    if p.is_absolute():
        try:
            return str(p.resolve().relative_to(REPO))
        except ValueError:
            pass
    return str(path)


def module_env() -> dict[str, str]:
    """The environment for a child process that runs one of our modules (``python -m ...``): this
    checkout first on its path, whatever the working directory or an installed copy says."""
    return {**os.environ, "PYTHONPATH": str(REPO)}


__all__ = ["REPO", "DATA_DIR", "TRACES_DIR", "DEFAULT_TRACE", "AZURE_TRACE", "REPORTS", "DEFAULT_STATE_DIR", "shown",
           "module_env"]
