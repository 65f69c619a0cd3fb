"""One repetition: the entry point that runs an experiment's repetition on one fabric.

settings -> driver.prepare (the traffic, before anything is built) -> driver.run on a network
backend (``testbed.backends``: it brings a fabric up if it needs one and none is) -> the write-up
(``testbed.repetition.writeup``) -> the run directory ``testbed.report`` reads.
"""

from __future__ import annotations

import time
from pathlib import Path

from common.errors import TestbedError
from testbed.backends.base import Backend, Log
from testbed.repetition.drivers.base import Driver, conditions
from testbed.repetition.drivers.live import LiveDriver
from testbed.repetition.drivers.plan import PlanDriver
from testbed.repetition.spec import RepetitionSpec
from testbed.repetition.writeup import write_up

DRIVERS: dict[str, type[Driver]] = {d.name: d for d in (PlanDriver, LiveDriver)}


def driver_for(name: str) -> Driver:
    if name not in DRIVERS:
        raise TestbedError(f"driver {name!r} is unknown: expected one of {', '.join(DRIVERS)}")
    return DRIVERS[name]()


def run_repetition(spec: RepetitionSpec, backend: Backend, out_root: Path | None = None, log: Log = print,
                   run_dir: Path | None = None) -> Path:
    """Run one repetition on ``backend`` (resolved by the caller, once for all its repetitions) and write its
    run directory (``run_dir``, or a new ``<out_root>/<run-id>``)."""
    driver = driver_for(spec.serving.driver)
    backend.refuse_unsupported(conditions(spec))
    net = backend.network(spec.fabric)
    prepared = driver.prepare(spec, net)  # bad input fails before anything is built
    if run_dir is None:
        run_dir = Path(out_root) / (time.strftime("%Y%m%d-%H%M%S") + f"-{spec.kind}{spec.fabric.args['gpus']}")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=False)
    carried = driver.run(prepared, backend, spec, run_dir, log)
    write_up(run_dir, spec, driver, prepared, carried, net)
    return run_dir
