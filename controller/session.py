"""The controller's logic in plain Python: one session per switch, and the fabric-wide checks.

When a switch connects it is wiped and given its whole program from
``controller.rules`` in one batch closed by a barrier; after the barrier its
group and flow tables are read back and compared with the program. Once every
switch is read back a cabling probe goes out of every switch-to-switch port
(``controller.cabling``). A reconnecting switch is simply programmed again.

Status for ``testbed up`` / ``status`` goes to a JSON file (path in the
config), rewritten atomically at every housekeeping tick: which switches are
connected, installed, verified; the cabling result; table-miss (unexpected)
packet counts; the PFC pause daemon.

The os-ken app (``controller.app``) turns OpenFlow events into calls here and
implements ``Switch`` over a datapath; the unit tests implement it with a fake.
Nothing here imports os-ken, so this runs and is tested without a switch.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Protocol

from controller.cabling import CablingCheck
from controller.pause_daemon import PauseDaemonSupervisor, Process
from controller.rules import PRIO_MISS, FlowSpec, GroupSpec, SwitchProgram, fabric_programs
from testbed.fabric import build_fabric

FRAMEWORK = "os_ken"  # the OpenFlow library controller.app runs on, named in the status file
TICKS_PER_POLL = 4  # the counters of verified switches are read every 4th housekeeping tick
REPROBE_S = 2.0  # a lost probe gets one more chance every 2 s


class Switch(Protocol):
    """One switch connection as the sessions see it.

    Two objects for the same connection compare equal, so an event from an
    older connection of a switch can be told from the current one.
    """

    @property
    def dpid(self) -> int | None: ...

    def clear(self) -> None:
        """Delete every flow (all tables) and every group."""

    def add_group(self, group: GroupSpec) -> None: ...

    def add_flow(self, flow: FlowSpec) -> None: ...

    def barrier(self) -> None: ...

    def request_groups(self) -> None:
        """Ask for the group descriptions; the replies come to ``FabricSessions.groups_reply``."""

    def request_flows(self, table_id: int | None = None) -> None:
        """Ask for the flow entries of one table (None: every table); replies come to ``flows_reply``."""

    def packet_out(self, port: int, data: bytes) -> None: ...


@dataclass(frozen=True)
class FlowStat:
    """One flow entry as a switch reports it: the rule, and the packets it matched."""

    spec: FlowSpec
    packets: int


def initial_state() -> dict:
    """A switch's entry in the status file before it ever connected."""
    return {"connected": False, "installed": False, "verified": False, "connects": 0,
            "flows_read": 0, "mismatch": None, "miss_packets": 0}


def mismatch(want_flows: set, want_groups: set, got_flows: set, got_groups: set) -> str | None:
    """None when a switch holds exactly its program, else how it differs (for the status file)."""
    if got_flows == want_flows and got_groups == want_groups:
        return None
    missing = len(want_flows - got_flows) + len(want_groups - got_groups)
    extra = len(got_flows - want_flows) + len(got_groups - want_groups)
    return f"{missing} rules missing, {extra} unexpected"


class SwitchSession:
    """One switch of the fabric across its connections: program it, read it back, compare."""

    def __init__(self, program: SwitchProgram, logger: logging.Logger) -> None:
        self.program = program
        self.logger = logger
        self.state = initial_state()
        self.switch: Switch | None = None
        self._flows: list[FlowStat] = []  # parts of a multipart flow-stats reply
        self._groups: list[GroupSpec] = []

    @property
    def name(self) -> str:
        """The switch's name in the fabric model (and in the status file)."""
        return self.program.switch

    def connect(self, switch: Switch) -> None:
        """Wipe the switch and send its whole program; the barrier reply starts the read-back."""
        self.switch = switch
        self.state.update(connected=True, installed=False, verified=False, mismatch=None)
        self.state["connects"] += 1
        switch.clear()
        for group in self.program.groups:
            switch.add_group(group)
        for flow in self.program.flows:
            switch.add_flow(flow)
        switch.barrier()
        self.logger.info("%s: sent %d flows, %d groups", self.name, len(self.program.flows),
                         len(self.program.groups))

    def installed(self, switch: Switch) -> None:
        """The program is in (the barrier came back): read the groups and flows back."""
        self.state["installed"] = True
        self._flows, self._groups = [], []
        switch.request_groups()
        switch.request_flows()

    def groups_read(self, groups: list[GroupSpec]) -> None:
        """Keep the groups until the flows are complete: they are compared together."""
        self._groups.extend(groups)

    def flows_read(self, stats: list[FlowStat], more: bool) -> None:
        """Take a flow-stats reply part; at the last one update the counters and, until verified, compare."""
        self._flows.extend(stats)
        if more:
            return
        stats, self._flows = self._flows, []
        self.state["flows_read"] = len(stats)
        self.state["miss_packets"] = sum(s.packets for s in stats if s.spec.priority == PRIO_MISS)
        if self.state["verified"]:
            return  # periodic poll for counters only
        groups, self._groups = self._groups, []
        self._compare({s.spec for s in stats}, set(groups), len(stats))

    def _compare(self, got_flows: set[FlowSpec], got_groups: set[GroupSpec], n_read: int) -> None:
        problem = mismatch(set(self.program.flows), set(self.program.groups), got_flows, got_groups)
        if problem is None:
            self.state.update(verified=True, mismatch=None)
            self.logger.info("%s: read back %d flows, %d groups: as intended", self.name, n_read,
                             len(got_groups))
        else:
            self.state["mismatch"] = problem
            self.logger.error("%s: read-back mismatch: %s", self.name, problem)

    def disconnect(self, switch: Switch) -> None:
        """Forget the connection, unless a newer one has already replaced it."""
        if self.switch is None or self.switch != switch:
            return
        self.switch = None
        self.state.update(connected=False, installed=False, verified=False)
        self.logger.warning("%s disconnected", self.name)

    def poll_counters(self) -> None:
        """Read table 0's counters again (the table-miss count) once the switch is verified."""
        if self.switch is not None and self.state["verified"]:
            self.switch.request_flows(table_id=0)


def start_pfcd(fabric, config: dict) -> Process:
    """Compute the PFC policy and start the pause daemon on it."""
    from controller.pfc import launch  # only when PFC is on: it brings the datapath plan

    return launch.start(fabric, config)


class FabricSessions:
    """Every switch's session, the cabling check and the status file, for one fabric."""

    def __init__(self, config: dict, logger: logging.Logger | None = None, start_pfc=start_pfcd) -> None:
        self.config = config
        self.logger = logger or logging.getLogger(__name__)
        self.fabric = build_fabric(**config["fabric"])
        self.sessions = {name: SwitchSession(program, self.logger)
                         for name, program in fabric_programs(self.fabric).items()}
        self.by_dpid = {s.program.dpid: s for s in self.sessions.values()}
        self.status_file = config["status_file"]
        self.cabling = CablingCheck(self.fabric)
        self.pfc: PauseDaemonSupervisor | None = None
        if config.get("pfc", {}).get("enabled"):
            self.pfc = PauseDaemonSupervisor(config["state_dir"], lambda: start_pfc(self.fabric, config), self.logger)
        self._ticks = 0
        self._probed_at: float | None = None

    # ------------------------------------------------------------ OpenFlow events
    def _session(self, switch: Switch) -> SwitchSession | None:
        """The session of a switch; None (logged) for a datapath not in the fabric."""
        session = self.by_dpid.get(switch.dpid)
        if session is None:
            self.logger.warning("unknown datapath %016x; ignored", switch.dpid)
        return session

    def switch_connected(self, switch: Switch) -> None:
        """A features reply: the switch is ready for its program."""
        if session := self._session(switch):
            session.connect(switch)

    def barrier_reply(self, switch: Switch) -> None:
        """Everything sent before the barrier is installed."""
        if session := self._session(switch):
            session.installed(switch)

    def groups_reply(self, switch: Switch, groups: list[GroupSpec]) -> None:
        """A group-desc reply (of a read-back)."""
        if session := self.by_dpid.get(switch.dpid):
            session.groups_read(groups)

    def flows_reply(self, switch: Switch, stats: list[FlowStat], more: bool) -> None:
        """A flow-stats reply part (of a read-back or a counter poll); ``more``: parts follow."""
        if session := self._session(switch):
            session.flows_read(stats, more)

    def switch_gone(self, switch: Switch) -> None:
        """The connection closed."""
        if session := self.by_dpid.get(switch.dpid):
            session.disconnect(switch)

    def packet_in(self, switch: Switch, data: bytes) -> None:
        """A punted frame: the probe rule is the only one that punts, and only probes are recorded."""
        self.cabling.received(switch.dpid, data)

    # ------------------------------------------------------------ housekeeping
    def all_verified(self) -> bool:
        """Every switch holds exactly its program: the fabric can be probed and used."""
        return all(s.state["verified"] for s in self.sessions.values())

    def send_probes(self, now: float) -> None:
        """One probe out of every switch-to-switch port of every connected switch."""
        for session in self.sessions.values():
            if session.switch is None:
                continue
            for port, frame in self.cabling.probes(session.name):
                session.switch.packet_out(port, frame)
        self.cabling.probes_sent = True
        self._probed_at = now

    def tick(self, now: float) -> None:
        """Housekeeping (the app calls it every 0.25 s): PFC and probes once all is verified,
        counters every 4th tick, then the status file."""
        self._ticks += 1
        if self.all_verified():
            if self.pfc is not None and not self.pfc.tried:
                self.pfc.start()
            if not self.cabling.probes_sent:
                self.send_probes(now)
            elif self._probed_at is not None and self.cabling.result()["wrong"] and now - self._probed_at > REPROBE_S:
                self.send_probes(now)
        if self._ticks % TICKS_PER_POLL == 0:
            for session in self.sessions.values():
                session.poll_counters()
        self.write_status(now)

    def status(self, now: float) -> dict:
        """The status file's document."""
        return {
            "framework": FRAMEWORK,
            "pid": os.getpid(),
            "updated": now,
            "switches": {name: s.state for name, s in self.sessions.items()},
            "cabling": self.cabling.result(),
            "miss_packets": sum(s.state["miss_packets"] for s in self.sessions.values()),
            "pfc": self.pfc.status() if self.pfc is not None else None,
        }

    def write_status(self, now: float) -> None:
        """Replace the status file atomically: readers never see half a document."""
        tmp = self.status_file + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(self.status(now), fh)
        os.replace(tmp, self.status_file)
