"""The controller's side of PFC: compute the policy, hand it to the pause daemon.

The controller owns the policy: from the fabric model and the routing it
derives, for every switch egress queue, its XOFF/XON thresholds and the
feeders to pause (``pfc.policy``), adds what the daemon needs to
reach each queue (devices and namespaces from the datapath plan), writes it
to ``pfc_policy.json`` in the state directory and starts ``pfcd`` on it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pfc import files
from pfc import policy as pfc_policy
from testbed.paths import REPO, module_env


def with_burst_headroom(cfg: "pfc_policy.PfcConfig", rate_bps: float, mtu: int, burst_bytes: int):
    """Default headroom for the emulated links: besides the frames in flight
    and the daemon's reaction, a resumed tbf sends its whole bucket (``burst``)
    at once, so a link can deliver that much more after XOFF. A user-given
    headroom is kept (and checked against the in-flight minimum by resolve)."""
    from dataclasses import replace

    if cfg.headroom_bytes is not None:
        return cfg
    need = pfc_policy.min_headroom(rate_bps, mtu, cfg.reaction_ms or pfc_policy.DEFAULT_REACTION_MS) + burst_bytes
    return replace(cfg, headroom_bytes=-(-need // 1000) * 1000)


def daemon_policy(fabric, datapath: dict, pfc: dict, state_dir: str) -> dict:
    """The pause daemon's policy document: thresholds and feeders, with the devices, namespaces and
    NIC addresses only the datapath plan knows."""
    from testbed.emulation.datapath import DatapathConfig, plan_datapath

    dp = DatapathConfig(**datapath)
    plan = plan_datapath(fabric, dp)
    cfg = pfc_policy.PfcConfig(**{k: v for k, v in pfc.items() if k in pfc_policy.PfcConfig.__dataclass_fields__})
    cfg = with_burst_headroom(cfg, dp.rate_bps, dp.mtu, dp.burst_bytes)
    resolved = pfc_policy.resolve(cfg, dp.rate_bps, dp.mtu, dp.buffer_bytes)
    th = pfc_policy.thresholds(fabric, resolved)
    sources = pfc_policy.failover_sources_via(fabric)  # a failed-over group sends from other feeders
    reach = pfc_policy.failover_feeders(fabric)
    queues = {}
    for q in plan.queues:
        entry = {"kind": q.kind, "dev": q.dev, "netns": q.netns, "peer": q.peer,
                 "limit": dp.nic_buffer_bytes if q.kind == "nic" else dp.buffer_bytes}
        if q.qid in th:
            entry.update(xoff=th[q.qid]["xoff"], xon=th[q.qid]["xon"], limit=th[q.qid]["limit"],
                         feeders=reach[q.qid],
                         sources={f: sorted(nics) for f, nics in sources[q.qid].items()})
            if "dynamic" in th[q.qid]:
                entry["dynamic"] = th[q.qid]["dynamic"]
        queues[q.qid] = entry
    from testbed.fabric import addressing

    nics = {f"gpu{g}:p{p}": addressing.ip_of(g, p) for g, p in sorted(fabric.attachment)}
    return {"rate_bps": dp.rate_bps, "nics": nics, "burst_bytes": dp.burst_bytes, "mtu": dp.mtu,
            "poll_us": resolved.poll_us,
            "log": os.path.join(state_dir, files.LOG_FILE), "status": os.path.join(state_dir, files.STATUS_FILE),
            "resolved": pfc_policy.policy_doc(fabric, resolved).get("config"), "queues": queues}


def start(fabric, config: dict) -> subprocess.Popen:
    """Write the policy next to the controller's files and start pfcd on it (its output to pfcd.log)."""
    sdir = config["state_dir"]
    doc = daemon_policy(fabric, config["datapath"], config["pfc"], sdir)
    path = Path(sdir) / files.POLICY_FILE
    path.write_text(json.dumps(doc, indent=1))
    log = open(Path(sdir) / "pfcd.log", "ab")
    return subprocess.Popen([sys.executable, "-m", "pfc.pfcd", "--policy", str(path)], stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
                            env=module_env())
