"""OpenFlow 1.3 messages for the session core, over an os-ken datapath.

``OsKenSwitch`` implements ``controller.session.Switch``: rule specs become
FlowMods, GroupMods and stats requests. ``flow_stats`` and ``group_specs``
turn the replies back into specs, so the read-back compares like with like;
``port_states`` and ``port_live`` read port descriptions and port-status.

Group buckets watch their own output port: OVS then leaves a bucket whose
port has no carrier out of a select group's hash and out of a fast-failover
group's choice (ovs-ofctl(8): "for each live bucket"; fast failover "the first
live bucket"), with no controller round trip.
"""

from __future__ import annotations

from os_ken.ofproto import ofproto_v1_3

from controller.rules import FAST_FAILOVER, SELECT, FlowSpec, GroupSpec
from controller.session import FlowStat

GROUP_TYPES = {SELECT: ofproto_v1_3.OFPGT_SELECT, FAST_FAILOVER: ofproto_v1_3.OFPGT_FF}


class OsKenSwitch:
    """One os-ken Datapath (a switch connection); equal to another wrapper of the same datapath."""

    __slots__ = ("dp",)

    def __init__(self, dp) -> None:
        self.dp = dp

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OsKenSwitch) and other.dp is self.dp

    def __hash__(self) -> int:
        return id(self.dp)

    @property
    def dpid(self) -> int | None:
        return self.dp.id

    def _protocol(self):
        return self.dp, self.dp.ofproto, self.dp.ofproto_parser

    def _group_mod(self, command: int, group: GroupSpec) -> None:
        dp, ofp, parser = self._protocol()
        weight = 1 if group.kind == SELECT else 0  # weights are a select group's only
        buckets = [parser.OFPBucket(weight=weight, watch_port=port if group.watched else ofp.OFPP_ANY,
                                    watch_group=ofp.OFPG_ANY, actions=[parser.OFPActionOutput(port)])
                   for port in group.ports]
        dp.send_msg(parser.OFPGroupMod(dp, command, GROUP_TYPES[group.kind], group.group_id, buckets))

    def add_group(self, group: GroupSpec) -> None:
        self._group_mod(self.dp.ofproto.OFPGC_ADD, group)

    def modify_group(self, group: GroupSpec) -> None:
        self._group_mod(self.dp.ofproto.OFPGC_MODIFY, group)

    def delete_group(self, group_id: int) -> None:
        dp, ofp, parser = self._protocol()
        dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=group_id))

    def add_flow(self, flow: FlowSpec) -> None:
        dp, ofp, parser = self._protocol()
        dp.send_msg(parser.OFPFlowMod(dp, priority=flow.priority, match=parser.OFPMatch(**flow.match_dict),
                                      instructions=instructions(ofp, parser, flow)))

    def delete_flow(self, flow: FlowSpec) -> None:
        dp, ofp, parser = self._protocol()
        dp.send_msg(parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE_STRICT, table_id=ofp.OFPTT_ALL,
                                      priority=flow.priority, out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                                      match=parser.OFPMatch(**flow.match_dict)))

    def barrier(self) -> None:
        dp, _, parser = self._protocol()
        dp.send_msg(parser.OFPBarrierRequest(dp))

    def request_ports(self) -> None:
        dp, _, parser = self._protocol()
        dp.send_msg(parser.OFPPortDescStatsRequest(dp, 0))

    def request_groups(self) -> None:
        dp, _, parser = self._protocol()
        dp.send_msg(parser.OFPGroupDescStatsRequest(dp, 0))

    def request_flows(self, table_id: int | None = None) -> None:
        dp, _, parser = self._protocol()
        if table_id is None:  # os-ken's defaults: every table, any match
            dp.send_msg(parser.OFPFlowStatsRequest(dp))
        else:
            dp.send_msg(parser.OFPFlowStatsRequest(dp, table_id=table_id, match=parser.OFPMatch()))

    def packet_out(self, port: int, data: bytes) -> None:
        dp, ofp, parser = self._protocol()
        dp.send_msg(parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                                        actions=[parser.OFPActionOutput(port)], data=data))


def instructions(ofp, parser, flow: FlowSpec) -> list:
    """A FlowSpec's actions as one apply-actions instruction (no actions: the rule drops)."""
    actions = []
    for kind, arg in flow.actions:
        if kind == "output":
            actions.append(parser.OFPActionOutput(arg))
        elif kind == "group":
            actions.append(parser.OFPActionGroup(arg))
        elif kind == "controller":
            actions.append(parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER))
    return [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]


def flow_spec(stat) -> FlowSpec:
    """A flow-stats entry as a FlowSpec, to compare with what was installed."""
    actions: list[tuple[str, int]] = []
    for inst in stat.instructions:
        for act in getattr(inst, "actions", []):
            name = type(act).__name__
            if name == "OFPActionOutput":
                if act.port == ofproto_v1_3.OFPP_CONTROLLER:
                    actions.append(("controller", 0))
                else:
                    actions.append(("output", act.port))
            elif name == "OFPActionGroup":
                actions.append(("group", act.group_id))
            else:
                actions.append((name, 0))
    return FlowSpec(stat.priority, tuple(sorted(stat.match.items())), tuple(actions))


def flow_stats(body: list) -> list[FlowStat]:
    """A flow-stats reply's entries with their packet counters."""
    return [FlowStat(flow_spec(s), s.packet_count) for s in body]


def group_specs(body: list) -> list[GroupSpec]:
    """A group-desc reply's entries; each bucket of ours has one output action (a type that is not ours keeps
    its number, so it compares unequal)."""
    kinds = {t: kind for kind, t in GROUP_TYPES.items()}
    return [GroupSpec(g.group_id, tuple(b.actions[0].port for b in g.buckets), kinds.get(g.type, str(g.type)),
                      all(b.watch_port == b.actions[0].port for b in g.buckets)) for g in body]


def port_live(desc) -> bool:
    """A port (an OFPPort) can carry traffic: it has link and is not administratively down."""
    return not (desc.state & ofproto_v1_3.OFPPS_LINK_DOWN or desc.config & ofproto_v1_3.OFPPC_PORT_DOWN)


def port_states(body: list) -> list[tuple[int, bool]]:
    """A port-desc reply as (OpenFlow port, live) pairs."""
    return [(p.port_no, port_live(p)) for p in body]
