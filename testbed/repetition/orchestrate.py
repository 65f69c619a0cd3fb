"""One repetition: the entry point that runs an experiment's repetition on one fabric.

Bring the fabric up if none is (down again at the end), prepare the driver's traffic, run it
with the queue sampler, cross traffic and faults around it, and write the run directory.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from testbed.emulation import fabricctl
from testbed.emulation.datapath import DatapathConfig
from testbed.errors import TestbedError
from testbed.repetition.config import RepetitionConfig
from testbed.repetition.cross import start_cross_traffic, stop_cross_traffic
from testbed.repetition.replay import Prepared, prepare, run_agents
from testbed.repetition.sampler import QueueSampler
from testbed.repetition.writeup import Measured, write_up


def _pfc_snapshot(st) -> dict | None:
    """The PFC helper's status and the fabric's pause log, read before the fabric goes down."""
    if not st.get("pfc", {}).get("enabled"):
        return None
    sdir = Path(st["state_dir"])
    time.sleep(1.2)  # the helper flushes its log and status once a second
    try:
        status = json.loads((sdir / "pfc_status.json").read_text())
    except (OSError, ValueError):
        status = {}
    try:
        log_text = (sdir / "pfc.txt").read_text()
    except OSError:
        log_text = ""
    return {"status": status, "log": log_text}


def run_repetition(fabric_args: dict, dp: DatapathConfig, cfg: RepetitionConfig, out_root: Path | None = None,
                   log=print, run_dir: Path | None = None, pfc=None) -> Path:
    """Bring the fabric up if none is (down again at the end), replay, write the run directory
    (``run_dir``, or a new ``<out_root>/<run-id>``). ``pfc``: PfcConfig or its dict, for a fabric
    this call brings up (a running fabric keeps its own)."""
    if isinstance(pfc, dict):
        from pfc.policy import PfcConfig

        pfc = PfcConfig.from_dict(pfc)
    cfg.validate()
    st = fabricctl.load_state()
    if st is not None and (st["fabric"]["kind"] != fabric_args["kind"] or st["fabric"]["gpus"] != fabric_args["gpus"]):
        raise TestbedError(f"a different fabric is up ({st['fabric']['kind']}, {st['fabric']['gpus']} GPUs): "
                           "run 'testbed down' first")
    rate = st["config"]["rate_bps"] if st else dp.rate_bps
    mtu = st["config"]["mtu"] if st else dp.mtu
    prepared, live = _prepare_traffic(cfg, fabric_args, st, rate, mtu)  # bad input fails before anything is built
    if run_dir is None:
        run_dir = Path(out_root) / (time.strftime("%Y%m%d-%H%M%S") + f"-{fabric_args['kind']}{fabric_args['gpus']}")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=False)
    measured = _run_on_fabric(st, fabric_args, dp, pfc, cfg, prepared, live, run_dir, log)
    write_up(run_dir, cfg, prepared, live, measured, rate, mtu)
    return run_dir


def _prepare_traffic(cfg: RepetitionConfig, fabric_args: dict, st, rate: float, mtu: int):
    """(Prepared, LiveSetup or None): the planned replay's per-GPU plans, or the live driver's config."""
    if cfg.driver == "live":
        from testbed.repetition.live import prepare_live

        live = prepare_live(cfg, fabric_args["gpus"], rate)
        return Prepared(None, [], 0.0, live.requests, 0, [], cfg.represents_bps), live
    from testbed.fabric import build_fabric

    model = fabricctl.fabric_of_state(st) if st else build_fabric(**fabric_args)  # paths for the adaptive policy
    return prepare(cfg, fabric_args["gpus"], rate, mtu, model), None


def _run_on_fabric(st, fabric_args: dict, dp: DatapathConfig, pfc, cfg: RepetitionConfig, prepared: Prepared, live,
                   run_dir: Path, log) -> Measured:
    """Sample the queues and run the agents (and cross traffic) on the fabric, bringing it up and down
    again when none was up."""
    own = st is None
    try:
        if own:
            fabricctl.require_root()
            st = fabricctl.up(fabric_args, dp, log=log, pfc=pfc)
        sampler = QueueSampler(st, run_dir / "queues.csv")
        sampler.start()
        last = (live.config["spec"]["duration_s"] * cfg.time_dilation if live
                else max(r["start"] for r in prepared.plan_rows))
        cross = start_cross_traffic(st, cfg.cross_flows, cfg.seed, last) if cfg.cross_flows else []
        scheduler = None
        if cfg.faults:
            from testbed.repetition.fault_schedule import FaultScheduler

            scheduler = FaultScheduler(list(cfg.faults), cfg.time_dilation if live else 1 / cfg.speed,
                                       run_dir / "faults.jsonl", log)
        on_t0 = scheduler.start if scheduler else None
        try:
            if live:
                from testbed.repetition.live import run_live

                res = run_live(st, live, run_dir, cfg.transfer_timeout_s, cfg.connections, log, on_t0=on_t0)
            else:
                res = run_agents(st, prepared, run_dir, cfg.transfer_timeout_s, cfg.connections, log, on_t0=on_t0)
        finally:
            events = scheduler.finish() if scheduler else None
            fault_errors = scheduler.errors if scheduler else None
            cross_result = stop_cross_traffic(cross) if cross else None
            sampler.stop()
        return Measured(st, res, sampler, sampler.drops(), sampler.drops("switch"), time.monotonic(),
                         _pfc_snapshot(st), cross_result, events, fault_errors)
    finally:
        if own and fabricctl.load_state() is not None:
            fabricctl.down()

