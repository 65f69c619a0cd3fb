"""One repetition: the entry point that runs an experiment's repetition on one fabric.

settings -> driver.prepare (the traffic, before anything is built) -> driver.run on a network
backend (``testbed.backends``: it brings a fabric up if it needs one and none is) -> the write-up
(``testbed.repetition.writeup``) -> the run directory ``testbed.report`` reads.
"""

from __future__ import annotations

import time
from pathlib import Path

from common.errors import TestbedError
from fabrics.datapath import DatapathConfig
from testbed import backends
from testbed.backends.base import FabricSpec, Log
from testbed.repetition.config import RepetitionConfig
from testbed.repetition.driver import Driver, conditions
from testbed.repetition.live import LiveDriver
from testbed.repetition.replay import PlannedDriver
from testbed.repetition.writeup import write_up

DRIVERS: dict[str, type[Driver]] = {d.name: d for d in (PlannedDriver, LiveDriver)}


def driver_for(name: str) -> Driver:
    if name not in DRIVERS:
        raise TestbedError(f"driver {name!r} is unknown: expected one of {', '.join(DRIVERS)}")
    return DRIVERS[name]()


def run_repetition(fabric_args: dict, dp: DatapathConfig, cfg: RepetitionConfig, out_root: Path | None = None,
                   log: Log = print, run_dir: Path | None = None, pfc=None) -> Path:
    """Run one repetition and write its run directory (``run_dir``, or a new ``<out_root>/<run-id>``).
    ``pfc``: PfcConfig or its dict, for a fabric the backend brings up (a running fabric keeps its own)."""
    if isinstance(pfc, dict):
        from pfc.policy import PfcConfig

        pfc = PfcConfig.from_dict(pfc)
    backend = backends.get(cfg.backend)
    driver = driver_for(cfg.serving.driver)
    backend.refuse_unsupported(conditions(cfg, 1.0, 0.0))
    spec = FabricSpec(fabric_args, dp, pfc, cfg.represents_bps)
    net = backend.network(spec)
    prepared = driver.prepare(cfg, net)  # bad input fails before anything is built
    if run_dir is None:
        run_dir = Path(out_root) / (time.strftime("%Y%m%d-%H%M%S") + f"-{fabric_args['kind']}{fabric_args['gpus']}")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=False)
    carried = driver.run(prepared, backend, spec, cfg, run_dir, log)
    write_up(run_dir, cfg, driver, prepared, carried, net)
    return run_dir
