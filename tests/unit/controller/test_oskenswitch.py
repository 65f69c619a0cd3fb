"""controller.oskenswitch: rule specs -> os-ken OpenFlow 1.3 messages -> the specs a read-back yields.

No switch: a stand-in datapath collects the messages, which are serialized to
wire format (as os-ken would send them) and turned into the stats entries a
switch would report for them.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controller.oskenswitch import OsKenSwitch, flow_stats, group_specs, port_live, port_states
from controller.rules import FAST_FAILOVER, GroupSpec
from fabrics import build_fabric
from tests.support.programs import fabric_programs


def datapath(dpid=1):
    sent = []
    dp = SimpleNamespace(id=dpid, ofproto=ofp, ofproto_parser=parser, sent=sent)
    dp.send_msg = sent.append
    return dp


def programs(kind, **kw):
    return fabric_programs(build_fabric(kind, **kw)).values()


@pytest.mark.parametrize("kind,kw", [("zcube", {"gpus": 16, "gpus_per_switch": 8}), ("roft", {"gpus": 16})])
def test_flows_and_groups_come_back_from_a_read_back_as_the_same_specs(kind, kw):
    for program in programs(kind, **kw):
        dp = datapath(program.dpid)
        sw = OsKenSwitch(dp)
        for group in program.groups:
            sw.add_group(group)
        for flow in program.flows:
            sw.add_flow(flow)
        for msg in dp.sent:
            msg.serialize()  # valid on the wire
        mods = [m for m in dp.sent if isinstance(m, parser.OFPFlowMod)]
        stats = [parser.OFPFlowStats(priority=m.priority, match=m.match, instructions=m.instructions, packet_count=3)
                 for m in mods]
        assert [s.spec for s in flow_stats(stats)] == program.flows
        assert all(s.packets == 3 for s in flow_stats(stats))
        gmods = [m for m in dp.sent if isinstance(m, parser.OFPGroupMod)]
        want_type = ofp.OFPGT_SELECT if kind == "roft" else ofp.OFPGT_FF
        assert all(m.command == ofp.OFPGC_ADD and m.type == want_type for m in gmods)
        assert all(b.watch_port == b.actions[0].port and b.watch_group == ofp.OFPG_ANY for m in gmods
                   for b in m.buckets)  # the switch skips a bucket whose port is down
        assert all(b.weight == (1 if kind == "roft" else 0) for m in gmods for b in m.buckets)
        descs = [parser.OFPGroupDescStats(m.type, m.group_id, m.buckets) for m in gmods]
        assert group_specs(descs) == program.groups


def test_the_table_miss_rule_has_no_actions_and_the_probe_rule_punts_unbuffered():
    program = next(iter(programs("zcube", gpus=16, gpus_per_switch=8)))
    dp = datapath()
    for flow in program.flows[:2]:
        OsKenSwitch(dp).add_flow(flow)
    miss, probe = dp.sent
    assert miss.priority == 0 and miss.instructions[0].actions == []
    (out,) = probe.instructions[0].actions
    assert out.port == ofp.OFPP_CONTROLLER and out.max_len == ofp.OFPCML_NO_BUFFER


def test_a_group_is_modified_in_place_and_deleted_by_id():
    dp = datapath()
    OsKenSwitch(dp).modify_group(GroupSpec(3, (6, 7, 8)))
    OsKenSwitch(dp).modify_group(GroupSpec(4, (12, 10), FAST_FAILOVER))
    OsKenSwitch(dp).modify_group(GroupSpec(5, ()))  # nothing live: a group without buckets drops
    OsKenSwitch(dp).delete_group(4)
    select, ff, empty, delete = dp.sent
    for msg in dp.sent:
        msg.serialize()
    assert (select.command, select.type, select.group_id) == (ofp.OFPGC_MODIFY, ofp.OFPGT_SELECT, 3)
    assert [(b.actions[0].port, b.watch_port) for b in select.buckets] == [(6, 6), (7, 7), (8, 8)]
    assert (ff.command, ff.type, [b.watch_port for b in ff.buckets]) == (ofp.OFPGC_MODIFY, ofp.OFPGT_FF, [12, 10])
    assert empty.buckets == []
    assert (delete.command, delete.group_id) == (ofp.OFPGC_DELETE, 4)
    assert group_specs([parser.OFPGroupDescStats(m.type, m.group_id, m.buckets) for m in (select, ff)]) == [
        GroupSpec(3, (6, 7, 8)), GroupSpec(4, (12, 10), FAST_FAILOVER)]


def test_a_read_back_group_without_watch_ports_or_of_another_type_is_not_ours():
    out = parser.OFPActionOutput
    unwatched = parser.OFPBucket(weight=1, watch_port=ofp.OFPP_ANY, watch_group=ofp.OFPG_ANY, actions=[out(5)])
    (a, b) = group_specs([parser.OFPGroupDescStats(ofp.OFPGT_SELECT, 1, [unwatched]),
                          parser.OFPGroupDescStats(ofp.OFPGT_ALL, 2, [])])
    assert a == GroupSpec(1, (5,), watched=False) != GroupSpec(1, (5,))
    assert b.kind == str(ofp.OFPGT_ALL)


def test_a_flow_is_deleted_strictly_from_every_table():
    flow = next(f for f in next(iter(programs("zcube", gpus=16, gpus_per_switch=8))).flows if f.priority == 100)
    dp = datapath()
    OsKenSwitch(dp).delete_flow(flow)
    (msg,) = dp.sent
    msg.serialize()
    assert (msg.command, msg.table_id, msg.priority, msg.out_port, msg.out_group) == (
        ofp.OFPFC_DELETE_STRICT, ofp.OFPTT_ALL, flow.priority, ofp.OFPP_ANY, ofp.OFPG_ANY)
    assert sorted(msg.match.items()) == sorted(flow.match)


def test_port_descriptions_and_status_read_as_live_or_not():
    dp = datapath()
    OsKenSwitch(dp).request_ports()
    (req,) = dp.sent
    assert isinstance(req, parser.OFPPortDescStatsRequest)

    def port(no, state=0, config=0):
        return parser.OFPPort(no, "02:00:00:00:00:01", f"sw1-eth{no}", config, state, 0, 0, 0, 0, 0, 0)

    body = [port(1), port(2, state=ofp.OFPPS_LINK_DOWN), port(3, config=ofp.OFPPC_PORT_DOWN),
            port(4, state=ofp.OFPPS_LIVE)]
    assert port_states(body) == [(1, True), (2, False), (3, False), (4, True)]
    assert port_live(port(5)) and not port_live(port(6, state=ofp.OFPPS_LINK_DOWN | ofp.OFPPS_BLOCKED))


def test_read_back_asks_every_table_and_the_counter_poll_table_0():
    dp = datapath()
    OsKenSwitch(dp).request_flows()
    OsKenSwitch(dp).request_flows(table_id=0)
    every, table0 = dp.sent
    assert every.table_id == ofp.OFPTT_ALL and table0.table_id == 0


def test_probe_goes_out_of_one_port_unbuffered():
    dp = datapath()
    OsKenSwitch(dp).packet_out(7, b"x" * 60)
    (msg,) = dp.sent
    assert msg.buffer_id == ofp.OFP_NO_BUFFER and msg.in_port == ofp.OFPP_CONTROLLER
    assert [a.port for a in msg.actions] == [7] and msg.data == b"x" * 60
    msg.serialize()


def test_wrappers_of_one_datapath_are_one_connection():
    a, b = datapath(5), datapath(5)
    assert OsKenSwitch(a) == OsKenSwitch(a) and hash(OsKenSwitch(a)) == hash(OsKenSwitch(a))
    assert OsKenSwitch(a) != OsKenSwitch(b)
    assert OsKenSwitch(a) != None  # noqa: E711 - a session without a connection holds None
