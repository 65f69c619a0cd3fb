"""The driver protocol: what makes a repetition's traffic and reads its outcome.

A driver ``prepare``s the traffic from the repetition's settings and the network it will run on
(pure computation: bad input fails here, before anything is built), ``run``s it on a network
backend (``testbed.backends.base``: ``carry`` for a plan, ``serve`` for a serving cluster) and
``summarize``s what only it knows for summary.json (and its own files); the write-up
(``testbed.repetition.writeup``) does the rest, the same for every driver.

* ``plan`` (``testbed.repetition.drivers.plan.PlanDriver``): every KV transfer timed from the trace
  before the run;
* ``live`` (``testbed.repetition.drivers.live.LiveDriver``): the serving cluster runs with the network in
  the loop (prefill, decode, KV transfers and expert-parallel exchanges).
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import ClassVar, Protocol

from fabrics import Fabric
from testbed.backends.base import Backend, Carried, Conditions, LinkSettings, Log, Network
from testbed.repetition.spec import RepetitionSpec


class Prepared(Protocol):
    """What every driver's preparation has: the requests it serves and its warnings."""

    requests: int
    warnings: list[str]


class Driver(abc.ABC):
    name: ClassVar[str]

    @abc.abstractmethod
    def prepare(self, spec: RepetitionSpec, net: Network) -> Prepared:
        """The traffic, from the settings and the network it will run on; builds nothing."""

    @abc.abstractmethod
    def run(self, prepared: Prepared, backend: Backend, spec: RepetitionSpec, run_dir: Path, log: Log) -> Carried:
        """Carry the prepared traffic on ``backend``."""

    @abc.abstractmethod
    def summarize(self, prepared: Prepared, carried: Carried, rows: list[dict], run_dir: Path, fabric: Fabric,
                  link: LinkSettings) -> dict:
        """This driver's entries of summary.json (and its own files in ``run_dir``); ``rows``: every merged row."""


def conditions(spec: RepetitionSpec, cross_s: float = 0.0) -> Conditions:
    """What surrounds a repetition's traffic, from its spec; ``cross_s``: how long cross traffic runs (wall
    seconds)."""
    return Conditions(seed=spec.seed, cross_flows=spec.cross_flows, cross_s=cross_s, faults=tuple(spec.faults),
                      wall_per_run_s=spec.wall_per_run_s, timeout_s=spec.transfer_timeout_s,
                      connections=spec.serving.connections, hash_seed=spec.hash_seed,
                      recorded_paths=spec.recorded_paths, twin=spec.twin)
