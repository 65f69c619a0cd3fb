"""OpenFlow rules for a fabric, as plain data (no OpenFlow library needed).

The controller turns these into FlowMods and GroupMods and compares what a
switch reports back with them; unit tests run them through a fake flow table
instead of a switch (``tests/fakes``). One program per switch:

* priority 100: ``ip, ipv4_dst=<NIC port address>`` -> output port, or a group:
  the select group of the ECMP set (ROFT cross-rail traffic) or, on ZCube with
  parallel odd-even cables, the fast-failover group of the planned cable and
  its siblings. Every bucket watches its own output port, so the switch skips
  a bucket whose port is down without waiting for the controller;
* priority 1000: the cabling probe ethertype -> controller;
* priority 0: table-miss, no action (drop). Its packet counter is the
  health figure "unexpected packets" and should stay zero.
"""

from __future__ import annotations

from dataclasses import dataclass

from fabrics import Fabric
from fabrics.failover import NOTHING_DEAD, Dead, bucket_order, live_buckets
from fabrics.routing import ForwardingTables, forwarding_tables

ETH_IPV4 = 0x0800
PROBE_ETHERTYPE = 0x88B5  # IEEE local experimental: cabling probes
PROBE_DST_MAC = "02:ff:ff:ff:ff:fe"
PRIO_ROUTE, PRIO_PROBE, PRIO_MISS = 100, 1000, 0
SELECT, FAST_FAILOVER = "select", "ff"  # group types


@dataclass(frozen=True)
class FlowSpec:
    """One flow entry as plain, hashable data: what is sent and what a read-back must equal."""

    priority: int
    match: tuple[tuple[str, object], ...]  # sorted (field, value) pairs
    actions: tuple[tuple[str, int], ...]  # ("output", port) | ("group", id) | ("controller", 0); () drops

    @property
    def match_dict(self) -> dict:
        """The match as keyword arguments (an OpenFlow match is built from them)."""
        return dict(self.match)


@dataclass(frozen=True)
class GroupSpec:
    """One group, comparable like a FlowSpec: one bucket per port, in order. ``select``: ROFT's ECMP set
    (the switch hashes the 5-tuple over the live buckets); ``ff``: ZCube's parallel cables (the first live
    bucket). ``watched``: every bucket watches its own output port (what a read-back found)."""

    group_id: int
    ports: tuple[int, ...]
    kind: str = SELECT
    watched: bool = True


@dataclass
class SwitchProgram:
    """Everything one switch should hold, so a connect can install it in one batch."""

    switch: str
    dpid: int
    flows: list[FlowSpec]
    groups: list[GroupSpec]


def _match(**fields) -> tuple[tuple[str, object], ...]:
    """Sorted pairs: equal matches compare equal however they were written."""
    return tuple(sorted(fields.items()))


def switch_program(fabric: Fabric, switch: str, tables: ForwardingTables | None = None,
                   dead: Dead | None = None, watch: bool = True) -> SwitchProgram:
    """A switch's rules from the routing model; one group per distinct bucket order (``failover.bucket_order``),
    numbered in destination order.

    With ``dead`` (what is down) the repaired program: each group keeps its id and the buckets whose port is up
    (cable and far switch alive), so a repair is a group MODIFY. A destination with fewer live buckets than its
    group (on a ROFT leaf: a spine lost every cable to the destination's leaf) points to a group of its own,
    numbered after the planned ones, or drops here when it has none left. Nothing dead: the planned program.

    ``watch`` False: no bucket watches its port and ZCube's parallel cables are plain outputs to the first live
    one, so only the controller's repair moves traffic off a dead cable (the baseline fast failover is
    measured against).
    """
    tables = tables or forwarding_tables(fabric)
    dead = dead or NOTHING_DEAD
    live = live_buckets(fabric, dead, switch, tables)
    routes = [(dst, hop, bucket_order(fabric, switch, hop)) for dst, hop in sorted(tables[switch].items())]
    planned: dict[tuple[str, tuple[int, ...]], int] = {}
    for _, hop, order in routes:
        if len(order) > 1 and (watch or hop.is_ecmp):
            planned.setdefault((SELECT if hop.is_ecmp else FAST_FAILOVER, order), len(planned) + 1)
    kept = {key: tuple(p for p in key[1] if dead.port_up(fabric, switch, p)) for key in planned}
    extra: dict[tuple[str, tuple[int, ...]], int] = {}
    flows = [
        FlowSpec(PRIO_MISS, (), ()),
        FlowSpec(PRIO_PROBE, _match(eth_type=PROBE_ETHERTYPE), (("controller", 0),)),
    ]
    for dst, hop, order in routes:
        if len(order) == 1:
            actions: tuple = (("output", order[0]),)
        elif not watch and not hop.is_ecmp:  # an unwatched fast-failover group would never fail over
            actions = (("output", live[dst][0]),) if live[dst] else ()
        else:
            key = (SELECT if hop.is_ecmp else FAST_FAILOVER, order)
            if live[dst] == kept[key]:
                actions = (("group", planned[key]),)
            elif live[dst]:
                actions = (("group", extra.setdefault((key[0], live[dst]), len(planned) + len(extra) + 1)),)
            else:
                actions = ()
        flows.append(FlowSpec(PRIO_ROUTE, _match(eth_type=ETH_IPV4, ipv4_dst=dst), actions))
    groups = [GroupSpec(gid, kept[key], key[0], watch) for key, gid in planned.items()]
    groups += [GroupSpec(gid, ports, kind, watch) for (kind, ports), gid in extra.items()]
    return SwitchProgram(switch=switch, dpid=fabric.switches[switch].dpid, flows=flows, groups=groups)


