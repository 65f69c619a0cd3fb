"""The controller's logic in plain Python: one session per switch, and the fabric-wide checks.

When a switch connects it is read back first (port states, groups, flows) and
nothing else is sent: a switch that already holds its program, as after a
controller restart (the bridges are fail-secure and keep forwarding on their
rules), is left alone. One that does not gets only the difference (groups
added or modified, flows added, replaced or deleted, unused groups deleted)
in one batch closed by a barrier, after which it is read back and compared
again. A switch holding rules of its own is changed only once every switch's
port states are known, or ``RESYNC_HOLD_S`` after the controller's start, so
a restart does not undo a repair it has not heard of yet. Once every switch
is verified a cabling probe goes out of every switch-to-switch port
(``controller.cabling``).

Failures: a cable is dead while either end's port is down (port-status
events, and the port descriptions read at every connect). The data plane
reacts by itself (every group bucket watches its port); the controller then
repairs the groups of every switch the change affects with group MODIFYs
(``rules.switch_program`` with the dead set; on a ROFT leaf also a group and
flows for the destinations a spine no longer reaches), and restores the
planned groups when the port comes back. ZCube without parallel cables has
nothing to repair in the network: the hosts move to the other NIC port pair
(``fabrics.failover``).

Status for ``testbed up`` / ``status`` goes to a JSON file (path in the
config), rewritten atomically at every housekeeping tick: which switches are
connected, installed, verified; the ports that are down; the cabling result;
table-miss (unexpected) packet counts; the PFC pause daemon.

The os-ken app (``controller.app``) turns OpenFlow events into calls here and
implements ``Switch`` over a datapath; the unit tests implement it with a fake.
Nothing here imports os-ken, so this runs and is tested without a switch.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from common import owned
from controller.cabling import CablingCheck, port_name
from controller.pause_daemon import PauseDaemonSupervisor, Process
from controller.rules import PRIO_MISS, FlowSpec, GroupSpec, SwitchProgram, switch_program
from fabrics import build_fabric
from fabrics.failover import Dead
from fabrics.routing import forwarding_tables

FRAMEWORK = "os_ken"  # the OpenFlow library controller.app runs on, named in the status file
TICKS_PER_POLL = 4  # the counters of verified switches are read every 4th housekeeping tick
REPROBE_S = 2.0  # a lost probe gets one more chance every 2 s
# A switch retries a lost controller at least every second (max_backoff=1000 ms, emulation/build.py);
# one that holds rules of its own waits this long at most for the other switches' port states.
RESYNC_HOLD_S = 3.0


class Switch(Protocol):
    """One switch connection as the sessions see it.

    Two objects for the same connection compare equal, so an event from an
    older connection of a switch can be told from the current one.
    """

    @property
    def dpid(self) -> int | None: ...

    def add_group(self, group: GroupSpec) -> None: ...

    def modify_group(self, group: GroupSpec) -> None:
        """Replace a group's type and buckets in place (OFPGC_MODIFY): the flows using it keep forwarding."""

    def delete_group(self, group_id: int) -> None: ...

    def add_flow(self, flow: FlowSpec) -> None:
        """Add a flow; one of the same priority and match is replaced (its packets go on being forwarded)."""

    def delete_flow(self, flow: FlowSpec) -> None:
        """Delete the flow of exactly this priority and match, from every table."""

    def barrier(self) -> None: ...

    def request_ports(self) -> None:
        """Ask for the port descriptions; the reply comes to ``FabricSessions.ports_reply``."""

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


Change = tuple[str, object]  # a Switch method's name and its argument


def changes(want: SwitchProgram, flows: set[FlowSpec], groups: set[GroupSpec]) -> list[Change]:
    """The Switch calls that turn a switch holding ``flows`` and ``groups`` into one holding ``want``, in an order
    that never leaves a flow on a missing group: groups added or modified, flows added (replacing the one of the
    same priority and match) or deleted, then groups no flow uses any more deleted. [] when it holds ``want``."""
    have = {g.group_id: g for g in groups}
    wanted_ids = {g.group_id for g in want.groups}
    out: list[Change] = []
    for group in want.groups:
        if group.group_id not in have:
            out.append(("add_group", group))
        elif have[group.group_id] != group:
            out.append(("modify_group", group))
    wanted_keys = {(f.priority, f.match) for f in want.flows}
    out += [("add_flow", f) for f in want.flows if f not in flows]
    out += [("delete_flow", f) for f in sorted(flows, key=repr) if (f.priority, f.match) not in wanted_keys]
    out += [("delete_group", gid) for gid in sorted(have) if gid not in wanted_ids]
    return out


def mismatch(want_flows: set, want_groups: set, got_flows: set, got_groups: set) -> str | None:
    """None when a switch holds exactly its program, else how it differs (for the status file)."""
    if got_flows == want_flows and got_groups == want_groups:
        return None
    missing = len(want_flows - got_flows) + len(want_groups - got_groups)
    extra = len(got_flows - want_flows) + len(got_groups - want_groups)
    return f"{missing} rules missing, {extra} unexpected"


class SwitchSession:
    """One switch of the fabric across its connections: read it back, send what differs, read back, compare."""

    def __init__(self, program: SwitchProgram, logger: logging.Logger,
                 may_change: Callable[[], bool] = lambda: True) -> None:
        self.program = program
        self.logger = logger
        self.may_change = may_change  # False: a switch holding rules of its own must wait (FabricSessions)
        self.state = initial_state()
        self.switch: Switch | None = None
        self._flows: list[FlowStat] = []  # parts of a multipart flow-stats reply
        self._groups: list[GroupSpec] = []
        self._synced = False  # this connection's first read-back was acted on
        self._held: tuple[set[FlowSpec], set[GroupSpec], int] | None = None  # a first read-back waiting to act
        self._revision = 0  # batches of changes sent
        self._asked = 0  # the revision the read-back in flight was asked at

    @property
    def name(self) -> str:
        """The switch's name in the fabric model (and in the status file)."""
        return self.program.switch

    def connect(self, switch: Switch) -> None:
        """Read the switch back (port states first) before sending it anything."""
        self.switch = switch
        self.state.update(connected=True, installed=False, verified=False, mismatch=None)
        self.state["connects"] += 1
        self._synced, self._held = False, None
        switch.request_ports()
        self._read_back(switch)

    def _read_back(self, switch: Switch) -> None:
        self._flows, self._groups = [], []
        self._asked = self._revision
        switch.request_groups()
        switch.request_flows()

    def installed(self, switch: Switch) -> None:
        """A barrier came back (what was sent before it is in): read the groups and flows back."""
        self.state["installed"] = True
        self._read_back(switch)

    def groups_read(self, groups: list[GroupSpec]) -> None:
        """Keep the groups until the flows are complete: they are compared together."""
        self._groups.extend(groups)

    def flows_read(self, stats: list[FlowStat], more: bool) -> None:
        """Take a flow-stats reply part; at the last one update the counters and, until verified, act or compare."""
        self._flows.extend(stats)
        if more:
            return
        stats, self._flows = self._flows, []
        groups, self._groups = self._groups, []
        self.state["flows_read"] = len(stats)
        self.state["miss_packets"] = sum(s.packets for s in stats if s.spec.priority == PRIO_MISS)
        if self.state["verified"] or self._asked != self._revision:
            return  # a counter poll, or a read-back older than changes sent since (their barrier reads back again)
        got = ({s.spec for s in stats}, set(groups), len(stats))
        if self._synced:
            self._compare(*got)
        elif (got[0] or got[1]) and not self.may_change():
            self._held = got
            self.logger.info("%s holds rules already: waiting for every switch's port states", self.name)
        else:
            self._sync(*got)

    def release(self) -> None:
        """Act on a held first read-back (every switch's port states are known, or the wait is over)."""
        if self._held is not None and self.switch is not None:
            got, self._held = self._held, None
            self._sync(*got)

    def _sync(self, got_flows: set[FlowSpec], got_groups: set[GroupSpec], n_read: int) -> None:
        """A connection's first read-back: nothing to send when the switch holds its program, else the difference."""
        self._synced = True
        todo = changes(self.program, got_flows, got_groups)
        if not todo:
            self.state["installed"] = True
            self._compare(got_flows, got_groups, n_read)
            return
        if got_flows or got_groups:
            self.logger.warning("%s holds other rules (%s): sending %d changes", self.name,
                                mismatch(set(self.program.flows), set(self.program.groups), got_flows, got_groups),
                                len(todo))
        self._send(todo)
        self.logger.info("%s: sent %d flows, %d groups", self.name, sum(c[0] == "add_flow" for c in todo),
                         sum(c[0] == "add_group" for c in todo))

    def _send(self, todo: list[Change]) -> None:
        """Send changes and a barrier: the barrier's reply reads the switch back."""
        for method, arg in todo:
            getattr(self.switch, method)(arg)
        self.switch.barrier()
        self._revision += 1
        self.state.update(installed=False, verified=False)

    def reprogram(self, program: SwitchProgram) -> None:
        """Make ``program`` the switch's program (what is dead changed). A synced connection gets the difference
        from the program it was given (group MODIFYs; no table is wiped); otherwise the next read-back compares
        with the new one."""
        old, self.program = self.program, program
        if self.switch is None or not self._synced:
            return
        todo = changes(program, set(old.flows), set(old.groups))
        if todo:
            self._send(todo)
            self.logger.info("%s: repaired with %d changes (%s)", self.name, len(todo),
                             ", ".join(sorted({c[0] for c in todo})))

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
        self.switch, self._held = None, None
        self.state.update(connected=False, installed=False, verified=False)
        self.logger.warning("%s disconnected", self.name)

    def poll_counters(self) -> None:
        """Read table 0's counters again (the table-miss count) once the switch is verified."""
        if self.switch is not None and self.state["verified"]:
            self.switch.request_flows(table_id=0)


def start_pfcd(fabric, config: dict) -> Process:
    """Compute the PFC policy and start the pause daemon on it."""

    from controller import pfc_launch  # only when PFC is on: it brings the datapath plan

    return pfc_launch.start(fabric, config)


class FabricSessions:
    """Every switch's session, the cabling check and the status file, for one fabric."""

    def __init__(self, config: dict, logger: logging.Logger | None = None, start_pfc=start_pfcd) -> None:
        self.config = config
        self.logger = logger or logging.getLogger(__name__)
        self.fabric = build_fabric(**config["fabric"])
        self.tables = forwarding_tables(self.fabric)
        self.watch = config.get("failover", "fast") == "fast"  # "controller": no watch ports, repair only
        self.sessions = {name: SwitchSession(switch_program(self.fabric, name, self.tables, watch=self.watch),
                                             self.logger,
                                             self._may_change)
                         for name in self.fabric.switches}
        self.by_dpid = {s.program.dpid: s for s in self.sessions.values()}
        self.down: set[tuple[str, int]] = set()  # (switch, OpenFlow port) reported down
        self._ports_known: set[str] = set()  # switches whose port descriptions were read
        self._started: float | None = None  # the first housekeeping tick
        self._hold_over = False
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
        """A features reply: read the switch back before sending it anything."""
        if session := self._session(switch):
            session.connect(switch)

    def _current(self, switch: Switch) -> SwitchSession | None:
        """The session whose connection ``switch`` is: a late reply on a replaced connection is dropped."""
        session = self._session(switch)
        return session if session is not None and session.switch == switch else None

    def barrier_reply(self, switch: Switch) -> None:
        """Everything sent before the barrier is installed."""
        if session := self._current(switch):
            session.installed(switch)

    def groups_reply(self, switch: Switch, groups: list[GroupSpec]) -> None:
        """A group-desc reply (of a read-back)."""
        if (session := self.by_dpid.get(switch.dpid)) and session.switch == switch:
            session.groups_read(groups)

    def flows_reply(self, switch: Switch, stats: list[FlowStat], more: bool) -> None:
        """A flow-stats reply part (of a read-back or a counter poll); ``more``: parts follow."""
        if session := self._current(switch):
            session.flows_read(stats, more)

    def switch_gone(self, switch: Switch) -> None:
        """The connection closed."""
        if session := self.by_dpid.get(switch.dpid):
            session.disconnect(switch)

    def port_status(self, switch: Switch, port_no: int, live: bool) -> None:
        """A port went down or came back (OFPT_PORT_STATUS): repair, or restore, every switch it affects."""
        if session := self._session(switch):
            self._set_ports(session.name, [(port_no, live)])

    def ports_reply(self, switch: Switch, ports: list[tuple[int, bool]]) -> None:
        """Port descriptions, read at every connect: a restarted controller learns what went down while it was
        away. Only the ports listed change."""
        if session := self._session(switch):
            self._ports_known.add(session.name)
            self._set_ports(session.name, ports)
            if self._may_change():
                for s in self.sessions.values():
                    s.release()

    def _set_ports(self, name: str, ports: list[tuple[int, bool]]) -> None:
        """Record port states; when the set of dead cables changes, give every affected switch its new program."""
        cabled = self.fabric.switches[name].ports
        before = set(self.down)
        for port, live in ports:
            if port not in cabled:
                continue  # the receive port, LOCAL: no cable of the model
            if live:
                self.down.discard((name, port))
            else:
                self.down.add((name, port))
        if self.down == before:
            return
        for port in sorted(self.down - before):
            self.logger.warning("%s is down", port_name(*port))
        for port in sorted(before - self.down):
            self.logger.warning("%s is up again", port_name(*port))
        dead = Dead.of(self.fabric, self.down)
        for switch, session in self.sessions.items():
            program = switch_program(self.fabric, switch, self.tables, dead, self.watch)
            if program != session.program:
                session.reprogram(program)

    def _may_change(self) -> bool:
        """A switch holding rules of its own may be changed: every switch's port states are known, or the wait
        after the start is over."""
        return self._hold_over or self._ports_known >= set(self.sessions)

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
        if self._started is None:
            self._started = now
        if not self._hold_over and now - self._started >= RESYNC_HOLD_S:
            self._hold_over = True
            for session in self.sessions.values():
                session.release()
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
            "ports_down": [port_name(*p) for p in sorted(self.down)],
            "cabling": self.cabling.result(),
            "miss_packets": sum(s.state["miss_packets"] for s in self.sessions.values()),
            "pfc": self.pfc.status() if self.pfc is not None else None,
        }

    def write_status(self, now: float) -> None:
        """Replace the status file atomically: readers never see half a document (no link followed)."""
        owned.write_private(self.status_file, json.dumps(self.status(now)))
