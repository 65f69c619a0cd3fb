"""The controller's side of PFC: hand the policy to the pause daemon and start it.

The controller owns the policy: ``pfc.policy.daemon_policy`` derives, for every switch egress queue,
its XOFF/XON thresholds and the feeders to pause, with what the daemon needs to reach each queue
(devices and namespaces from the datapath plan); this module writes it to ``pfc_policy.json`` in the
state directory and starts ``pfcd`` on it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from common import owned
from common.paths import REPO, module_env
from fabrics.datapath import DatapathConfig
from pfc import policy as pfc_policy
from pfc.files import POLICY_FILE
from pfc.launch import pfcd_args

LIFELINE_FD: int | None = None  # the controller's lifeline (controller.__main__ sets it), passed on to pfcd


def start(fabric, config: dict) -> subprocess.Popen:
    """Write the policy next to the controller's files and start pfcd on it (its output to pfcd.log), on the
    controller's lifeline when it has one. ``config``: the controller's config file (its ``datapath`` and
    ``pfc`` as the testbed wrote them)."""
    sdir = config["state_dir"]
    doc = pfc_policy.daemon_policy(fabric, DatapathConfig.from_dict(config["datapath"]),
                                   pfc_policy.PfcConfig.from_dict(config["pfc"]), sdir)
    owned.write_private(Path(sdir) / POLICY_FILE, json.dumps(doc, indent=1))
    log = owned.open_private(Path(sdir) / "pfcd.log", "ab")
    fds = (LIFELINE_FD,) if LIFELINE_FD is not None else ()
    with log:
        return subprocess.Popen([sys.executable, *pfcd_args(sdir, LIFELINE_FD)], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
                                env=module_env(), pass_fds=fds)
