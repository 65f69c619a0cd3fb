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
from testbed import owned
from testbed.paths import REPO, module_env

POLICY_FILE = files.POLICY_FILE
LIFELINE_FD: int | None = None  # the controller's lifeline (controller.__main__ sets it), passed on to pfcd


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


def pfcd_args(state_dir: str | Path, lifeline_fd: int | None = None) -> list[str]:
    """pfcd's arguments after the interpreter: the policy in ``state_dir``, and the lifeline it watches."""
    args = ["-m", "pfc.pfcd", "--policy", str(Path(state_dir) / POLICY_FILE)]
    return args + ["--lifeline-fd", str(lifeline_fd)] if lifeline_fd is not None else args


def is_pfcd(argv: tuple[str, ...] | list[str], state_dir: str | Path) -> bool:
    """Whether a command line is exactly one ``start`` gives for ``state_dir`` (any lifeline fd number):
    a process whose arguments only contain the module and the policy path is not the pause daemon."""
    if len(argv) < 2 or not Path(argv[0]).name.startswith("python"):
        return False
    args = list(argv[1:])
    plain = pfcd_args(state_dir)
    return args == plain or (len(args) == len(plain) + 2 and args[:-1] == plain + ["--lifeline-fd"]
                             and args[-1].isdigit())


def start(fabric, config: dict) -> subprocess.Popen:
    """Write the policy next to the controller's files and start pfcd on it (its output to pfcd.log), on the
    controller's lifeline when it has one."""
    sdir = config["state_dir"]
    doc = daemon_policy(fabric, config["datapath"], config["pfc"], sdir)
    owned.write_private(Path(sdir) / POLICY_FILE, json.dumps(doc, indent=1))
    log = owned.open_private(Path(sdir) / "pfcd.log", "ab")
    fds = (LIFELINE_FD,) if LIFELINE_FD is not None else ()
    with log:
        return subprocess.Popen([sys.executable, *pfcd_args(sdir, LIFELINE_FD)], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
                                env=module_env(), pass_fds=fds)
