"""The driver protocol: what makes a repetition's traffic and reads its outcome.

A driver ``prepare``s the traffic from the repetition's settings and the network it will run on
(pure computation: bad input fails here, before anything is built), ``run``s it on a network
backend (``testbed.backends.base``: ``carry`` for a plan, ``serve`` for a serving cluster) and
``summarize``s what only it knows for summary.json (and its own files); the write-up
(``testbed.repetition.writeup``) does the rest, the same for every driver.

* ``plan`` (``testbed.repetition.replay.PlannedDriver``): every KV transfer timed from the trace
  before the run;
* ``live`` (``testbed.repetition.live.LiveDriver``): the serving cluster runs with the network in
  the loop (prefill, decode, KV transfers and expert-parallel exchanges).
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import ClassVar, Protocol

from fabrics import Fabric
from testbed.backends.base import Backend, Carried, Conditions, FabricSpec, LinkSettings, Log, Network
from testbed.repetition.config import RepetitionConfig


class Prepared(Protocol):
    """What every driver's preparation has: the requests it serves and its warnings."""

    requests: int
    warnings: list[str]


class Driver(abc.ABC):
    name: ClassVar[str]

    @abc.abstractmethod
    def prepare(self, cfg: RepetitionConfig, net: Network) -> Prepared:
        """The traffic, from the settings and the network it will run on; builds nothing."""

    @abc.abstractmethod
    def run(self, prepared: Prepared, backend: Backend, spec: FabricSpec, cfg: RepetitionConfig, run_dir: Path,
            log: Log) -> Carried:
        """Carry the prepared traffic on ``backend``."""

    @abc.abstractmethod
    def summarize(self, prepared: Prepared, carried: Carried, rows: list[dict], run_dir: Path, fabric: Fabric,
                  link: LinkSettings) -> dict:
        """This driver's entries of summary.json (and its own files in ``run_dir``); ``rows``: every merged row."""


def conditions(cfg: RepetitionConfig, wall_per_run_s: float, cross_s: float) -> Conditions:
    """What surrounds a repetition's traffic, from its settings; ``wall_per_run_s``: wall seconds per run
    second (the driver's clock), ``cross_s``: how long cross traffic runs."""
    return Conditions(seed=cfg.seed, cross_flows=cfg.cross_flows, cross_s=cross_s, faults=tuple(cfg.faults),
                      wall_per_run_s=wall_per_run_s, timeout_s=cfg.transfer_timeout_s,
                      connections=cfg.serving.connections)
