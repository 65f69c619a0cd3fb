"""The network backend seam: what carries a repetition's messages and returns their arrivals and the
fabric's counters.

A backend is asked three things by a driver (``testbed.repetition.drivers.base``):

* ``network(spec)``: before anything is built, the fabric model and link settings a repetition on
  ``spec`` will run with (the driver plans its traffic from them); refuse what it cannot carry.
* ``carry(spec, traffic, conditions, run_dir, log)``: the planned replay. ``traffic`` lists every
  message with its start; the backend sends each at its start and returns the arrivals.
* ``serve(spec, traffic, conditions, run_dir, log)``: the live driver. ``traffic`` is the serving
  cluster (``traffic.model.serving.Cluster``, clock- and network-free) to drive with the network in
  the loop: each message the cluster sends is carried, its arrival told back to the cluster. The
  requests.csv, steps.csv and serving.json of the run come from ``traffic.runtime.serving_results``,
  whoever drives the cluster.

Both return a ``Carried``: the merged rows (KV transfers and EP messages, ``traffic.runtime.records``
columns, times in seconds after the run's t0), the fabric it ran on (``FabricRecord``), its queue
counters (``QueueCounters``: first and last snapshot and the samples between), its pause log
(``PauseLog``) and what happened around the run. The write-up (``testbed.repetition.writeup``) reads
only these objects; a backend's own state and files stay its business.

Times: every time a backend returns is in seconds on one clock of its own (the emulator's
CLOCK_MONOTONIC, a simulator's simulated time); ``Carried.t0`` is the run's time 0 on it, and the
rows are already relative to it. A pause log line starts with its time in nanoseconds on that clock.
"""

from __future__ import annotations

import abc
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar

from common import scale
from common.errors import TestbedError
from fabrics import Fabric
from fabrics.datapath import DatapathConfig
from traffic.runtime.agent import DEFAULT_TRANSFER_TIMEOUT_S

Log = Callable[[str], None]
# one queue's counters at one instant: bytes, packets, drops (packets), backlog (bytes); a counter the
# backend could not read is absent, never 0
Counters = dict[str, int]
Snapshot = dict[str, Counters]  # queue id -> its counters

CROSS_TRAFFIC = "cross_traffic"  # what a backend may support beyond carrying messages (Backend.supports)
FAULTS = "faults"
# what a backend builds from the fabric model beyond its paths (Backend.builds): what an experiment is checked for
DATAPATH = "datapath"  # the emulated datapath: interfaces, bridges, qdiscs (fabrics.datapath.plan_datapath)
QUEUES = "queues"  # a limit and PFC thresholds per switch queue (pfc.policy.queue_limits)


# ------------------------------------------------------------------ asked for
@dataclass(frozen=True)
class FabricSpec:
    """The fabric a repetition asks for."""

    args: dict  # {"kind": ..., **build_fabric keyword arguments}
    datapath: DatapathConfig  # the link settings asked for
    pfc: object = None  # pfc.policy.PfcConfig for a fabric the backend builds; None: PFC off
    represents_bps: float = scale.REAL_LINK_BPS  # the real link one link stands for

    @property
    def kind(self) -> str:
        return self.args["kind"]


@dataclass(frozen=True)
class LinkSettings:
    """Every link of the fabric a repetition runs on, as the write-up needs them."""

    rate_bps: float
    mtu: int
    burst_bytes: int
    buffer_bytes: int  # switch egress queue
    nic_buffer_bytes: int  # host NIC queue
    represents_bps: float  # the real link one link stands for

    @classmethod
    def of(cls, config: DatapathConfig | dict, represents_bps: float) -> "LinkSettings":
        """From a DatapathConfig (or its dict, as a fabric's state records it)."""
        d = config if isinstance(config, dict) else dataclasses.asdict(config)
        return cls(d["rate_bps"], d["mtu"], d["burst_bytes"], d["buffer_bytes"], d["nic_buffer_bytes"],
                   represents_bps)

    @property
    def payload_bytes(self) -> int:
        """TCP payload of a full packet."""
        return scale.payload_bytes(self.mtu)

    @property
    def frame_bytes(self) -> int:
        """A full Ethernet frame as a queue counts it."""
        return self.mtu + scale.ETHERNET_HEADER_BYTES

    @property
    def bytes_scale(self) -> float:
        """Real bytes per byte carried."""
        return scale.bytes_scale(self.rate_bps, self.represents_bps)


@dataclass(frozen=True)
class Network:
    """What a repetition will run on, known before anything is built."""

    model: Fabric
    link: LinkSettings


@dataclass(frozen=True)
class PlannedTraffic:
    """The planned replay's messages: plan rows (``traffic.runtime.records.PLAN_KEYS`` and request_id, dst,
    alt_src_ip, alt_dst_ip), ``start`` in seconds after t0."""

    rows: list[dict]

    @property
    def last_start_s(self) -> float:
        return max((r["start"] for r in self.rows), default=0.0)


@dataclass(frozen=True)
class ServingTraffic:
    """The serving cluster the live driver runs, as ``traffic.runtime.coordinator`` reads it: ``spec``
    (``ServingSpec`` as JSON), ``requests``, ``dilation`` (wall seconds per cluster second), ``ips`` and
    ``policy`` (the port-selection policy: a GPU pair's NIC port pairs are ``fabrics.routing.port_pairs``)."""

    config: dict

    @property
    def dilation(self) -> float:
        return float(self.config["dilation"])

    @property
    def duration_s(self) -> float:
        """Cluster seconds served."""
        return float(self.config["spec"]["duration_s"])

    def cluster(self, batched: bool = False):
        """A fresh ``traffic.model.serving.Cluster`` of this config (``batched``: its batched exchange path)."""
        from traffic.model import serving
        from traffic.runtime.coordinator import requests_from_config, spec_from_config

        return serving.Cluster(spec_from_config(self.config), requests_from_config(self.config), batched)


@dataclass(frozen=True)
class Conditions:
    """What surrounds the traffic: background flows, faults, the senders' settings."""

    seed: int = 0
    cross_flows: int = 0  # background bulk flows between random GPU pairs (needs CROSS_TRAFFIC)
    cross_s: float = 0.0  # how long they run (wall seconds)
    faults: tuple[dict, ...] = ()  # {at, duration, target, action} on this fabric (needs FAULTS)
    wall_per_run_s: float = 1.0  # wall seconds per run second (a fault's ``at`` is in run seconds)
    timeout_s: float = DEFAULT_TRANSFER_TIMEOUT_S  # a message not delivered by then has failed
    connections: str = "persistent"  # the senders' TCP connections (traffic.runtime.agent.CONNECTION_MODES)
    # the ECMP hash's seed where a backend draws the flows' source ports itself (the ns-3 twin): None = ``seed``;
    # another value draws a fresh ECMP outcome and leaves everything else that follows ``seed`` as it is
    hash_seed: int | None = None
    # an emulator repetition's ecmp.json: a backend that routes by itself (``Backend.routes_itself``) carries every
    # connection on its recorded ports and paths instead (``testbed.backends.paths.Recording``)
    recorded_paths: str | None = None
    # the ns-3 twin's model assumptions (``testbed.repetition.settings.Twin``); None: its defaults
    twin: object | None = None


# -------------------------------------------------------------------- returned
@dataclass(frozen=True)
class QueueInfo:
    """One queue of the fabric: a transmitter and what it feeds."""

    qid: str  # "sw3:4" (a switch's egress port) or "gpu5:p1" (a NIC port)
    kind: str  # "switch" or "nic"
    towards: str  # a switch name, or "gpu5:p1" for a switch port cabled to a GPU

    def as_dict(self) -> dict:
        return {"qid": self.qid, "kind": self.kind, "towards": self.towards}


@dataclass
class QueueCounters:
    """Every queue's counters over a run: the first and last complete snapshots (their deltas are the
    run's bytes and drops) and every sample between (queues.csv)."""

    queues: list[QueueInfo]
    first: Snapshot = field(default_factory=dict)
    last: Snapshot = field(default_factory=dict)
    t_first: float = 0.0
    t_last: float = 0.0
    samples: list[tuple[float, Snapshot]] = field(default_factory=list)  # (time, snapshot), in order
    error: str | None = None  # why the sampling ended early
    read_s: float = 0.0  # the longest time one snapshot took to read

    def drops(self, kind: str | None = None) -> int:
        """Packets the queues (of ``kind``: "switch" or "nic", default all) dropped during the run."""
        kinds = {q.qid: q.kind for q in self.queues}
        return sum(self.last[q]["drops"] - self.first[q]["drops"] for q in self.last
                   if q in self.first and kind in (None, kinds.get(q)))

    def link_bytes(self) -> dict[str, tuple[str, int]]:
        """queue -> (what it feeds, bytes it sent during the run)."""
        towards = {q.qid: q.towards for q in self.queues}
        return {q: (towards.get(q, ""), r["bytes"] - self.first[q]["bytes"]) for q, r in self.last.items()
                if q in self.first}


@dataclass(frozen=True)
class PauseLog:
    """The fabric's pause frames (PFC): pfc.txt lines ``time_ns node node_type port event cause``, with
    the pause daemon's own figures where it has them."""

    enabled: bool = False
    lines: tuple[str, ...] = ()
    pause_latency_ms: dict | None = None
    resume_latency_ms: dict | None = None
    netlink_errors: int | None = None


@dataclass(frozen=True)
class FabricRecord:
    """The fabric a repetition ran on, as config.json records it."""

    args: dict  # {"kind", **build_fabric keyword arguments}
    datapath: dict  # the link settings (DatapathConfig as a dict)
    pfc: dict  # the PFC settings (PfcConfig as a dict; {"enabled": False} without PFC)
    warnings: tuple[str, ...] = ()  # what the backend found odd about the fabric

    @property
    def kind(self) -> str:
        return self.args["kind"]


@dataclass(frozen=True)
class ServingOutcome:
    """The serving cluster's results (serving.json, ``traffic.runtime.serving_results``) and the driver of
    the cluster's complaints."""

    results: dict
    warnings: tuple[str, ...] = ()


@dataclass
class Carried:
    """What a backend returns for one repetition."""

    t0: float  # the run's time 0 on the backend's clock (seconds)
    t_end: float  # when the carrying ended, same clock
    rows: list[dict]  # every message (KV transfers and EP messages), merged, times in seconds after t0
    fabric: FabricRecord
    counters: QueueCounters | None  # None: the backend has no queues to count (the ideal network)
    pauses: PauseLog = field(default_factory=PauseLog)
    crashed: dict[str, int] = field(default_factory=dict)  # senders that exited early or badly: exit status
    ready_s: float | None = None  # from starting the senders to every one ready
    cpu_s: float | None = None  # the senders' CPU seconds
    serving: ServingOutcome | None = None  # the live driver's cluster (serve only)
    cross: dict | None = None  # cross traffic: {"flows", "goodput_bps", "per_flow"}
    faults: list[dict] | None = None  # fault actions as applied (None: none were asked for)
    fault_errors: list[str] | None = None  # fault actions that could not be applied
    clocks: dict | None = None  # several hosts: {"offsets": host -> offset_ms, uncertainty_ms, ...; "goal_ms"}


# --------------------------------------------------------------------- the seam
class Held:
    """What ``Backend.hold`` returns: a context; ``renew`` builds the fabric again (a repetition's retry after
    an environment failure gets a fresh one). Nothing held by default."""

    holds = False

    def __enter__(self) -> "Held":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def renew(self) -> None:
        return None


class Backend(abc.ABC):
    """A way to carry a repetition's messages (see the module docstring)."""

    name: ClassVar[str]
    supports: ClassVar[frozenset[str]] = frozenset()  # CROSS_TRAFFIC, FAULTS
    builds: ClassVar[frozenset[str]] = frozenset()  # DATAPATH, QUEUES: what an experiment on it is checked for
    realtime: ClassVar[bool] = False  # a repetition takes its run's wall time (else: as long as it computes)
    routes_itself: ClassVar[bool] = False  # picks each connection's path (can follow recorded paths: paths_from)
    forks: ClassVar[bool] = False  # its repetitions may run at once in forked processes (the experiment's jobs)
    setup_s: ClassVar[float] = 5.0  # a repetition's time besides the run itself, for the estimates
    once_s: ClassVar[float] = 0.0  # time spent once per process before the first repetition (the estimates)
    held_setup_s: ClassVar[float] = 5.0  # a repetition's time besides the run itself on a held fabric (``hold``)
    fabric_setup_s: ClassVar[float] = 0.0  # once per fabric a held fabric is built and taken down

    def estimate(self, exp) -> tuple[float, str] | None:
        """A repetition's wall seconds and how they were derived, for an experiment (``testbed.experiment``'s
        ``Experiment``), where the backend has a model of its own cost; None: the run's replayed time (a realtime
        backend) plus ``setup_s``."""
        return None

    def peak_bytes(self, exp) -> float | None:
        """A repetition's peak memory for an experiment, where the backend has a model of it (how many
        repetitions may run at once: ``testbed.experiment.run.jobs_for``); None: no model, no limit."""
        return None

    def hold(self, spec: FabricSpec, log: Log) -> "Held":
        """A fabric kept for several repetitions (``with backend.hold(spec, log) as held``): the emulated
        backend builds it once and every repetition on ``spec`` runs on it; others have nothing to keep."""
        return Held()

    def check(self, build_own: bool) -> None:
        """Raise when this machine cannot carry a repetition now (``build_own``: every repetition brings
        its own fabric up, so one already up is in the way). Nothing to check by default."""

    @property
    def label(self) -> str:
        """The backend as a line names it."""
        return f"the {self.name} backend"

    def refuse_unsupported(self, conditions: Conditions) -> None:
        """A TestbedError when ``conditions`` ask for something this backend does not do."""
        if conditions.cross_flows and CROSS_TRAFFIC not in self.supports:
            raise TestbedError(f"{self.label} carries no cross traffic: expected 0", key="cross_flows")
        if conditions.faults and FAULTS not in self.supports:
            raise TestbedError(f"{self.label} cannot inject faults: expected none", key="faults")

    @abc.abstractmethod
    def network(self, spec: FabricSpec) -> Network:
        """The fabric model and link settings a repetition on ``spec`` will run with; builds nothing."""

    @abc.abstractmethod
    def carry(self, spec: FabricSpec, traffic: PlannedTraffic, conditions: Conditions, run_dir: Path,
              log: Log) -> Carried:
        """Send every planned message at its start; the arrivals and the fabric's counters."""

    @abc.abstractmethod
    def serve(self, spec: FabricSpec, traffic: ServingTraffic, conditions: Conditions, run_dir: Path,
              log: Log) -> Carried:
        """Drive the serving cluster with this network in the loop; the arrivals, the fabric's counters and
        the cluster's results (``Carried.serving``)."""
