"""controller.app: the os-ken handlers hand events to the session core, end to end without a switch.

The events are shaped like os-ken's (``ev.msg.datapath``, ``ev.msg.body``,
``ev.datapath`` for a state change); the replies are built from the messages
the app sent, as a faithful switch would report them.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controller import app as app_module
from controller.cabling import probe_frame
from controller.session import RESYNC_HOLD_S

FABRIC = {"kind": "zcube", "gpus": 16, "gpus_per_switch": 8}


def datapath(dpid):
    sent = []
    return SimpleNamespace(id=dpid, ofproto=ofp, ofproto_parser=parser, sent=sent, send_msg=sent.append)


def ev(dp, **msg):
    return SimpleNamespace(msg=SimpleNamespace(datapath=dp, **msg))


@pytest.fixture
def app(tmp_path, monkeypatch):
    cfg = tmp_path / "controller.json"
    cfg.write_text(json.dumps({"fabric": FABRIC, "status_file": str(tmp_path / "status.json")}))
    monkeypatch.setenv("TESTBED_CONTROLLER_CONFIG", str(cfg))
    monkeypatch.setattr(app_module.hub, "spawn", lambda fn: fn)  # no housekeeping thread in a unit test
    return app_module.FabricController()


def port_desc(no, live=True):
    return parser.OFPPort(no, "02:00:00:00:00:01", f"p{no}", 0, 0 if live else ofp.OFPPS_LINK_DOWN, 0, 0, 0, 0, 0, 0)


def answer_first_read(app, dp, name, flows=(), groups=()):
    """Reply to a connect's read-back: every port live, and the given tables."""
    app.port_desc_reply(ev(dp, body=[port_desc(p) for p in app.core.fabric.switches[name].ports]))
    app.group_desc_reply(ev(dp, body=list(groups)))
    app.flow_stats_reply(ev(dp, body=list(flows), flags=0))


def held(dp):
    """What a switch holding every flow and group sent to ``dp`` reports: (flow stats, group descs)."""
    flows = [m for m in dp.sent if isinstance(m, parser.OFPFlowMod) and m.command == ofp.OFPFC_ADD]
    groups = [m for m in dp.sent if isinstance(m, parser.OFPGroupMod) and m.command == ofp.OFPGC_ADD]
    return ([parser.OFPFlowStats(priority=m.priority, match=m.match, instructions=m.instructions, packet_count=0)
             for m in flows], [parser.OFPGroupDescStats(g.type, g.group_id, g.buckets) for g in groups])


def answer_read_back(app, dp):
    """Reply to the barrier and the stats requests as a switch holding what was sent (flows in two parts)."""
    stats, descs = held(dp)
    app.barrier_reply(ev(dp))
    app.group_desc_reply(ev(dp, body=descs))
    app.flow_stats_reply(ev(dp, body=stats[:3], flags=ofp.OFPMPF_REPLY_MORE))
    app.flow_stats_reply(ev(dp, body=stats[3:], flags=0))


def test_features_read_back_first_then_program_an_empty_switch_and_the_replies_verify_it(app):
    name, session = next(iter(app.core.sessions.items()))
    dp = datapath(session.program.dpid)
    app.switch_features(ev(dp))
    assert [type(m) for m in dp.sent] == [parser.OFPPortDescStatsRequest, parser.OFPGroupDescStatsRequest,
                                          parser.OFPFlowStatsRequest]  # nothing written before the read-back
    answer_first_read(app, dp, name)
    written = dp.sent[3:]
    assert not any(getattr(m, "command", None) in (ofp.OFPFC_DELETE, ofp.OFPFC_DELETE_STRICT) for m in written)
    assert isinstance(written[-1], parser.OFPBarrierRequest)
    answer_read_back(app, dp)
    assert any(isinstance(m, parser.OFPGroupDescStatsRequest) for m in dp.sent[3:])
    assert session.state["verified"] and session.state["flows_read"] == len(session.program.flows)
    app.switch_gone(SimpleNamespace(datapath=dp))
    assert not session.state["connected"] and not session.state["verified"]


def test_a_restarted_controller_sends_a_programmed_switch_nothing(app):
    name, session = next(iter(app.core.sessions.items()))
    dp = datapath(session.program.dpid)
    app.switch_features(ev(dp))
    answer_first_read(app, dp, name)
    answer_read_back(app, dp)
    stats, descs = held(dp)
    restarted = app_module.FabricController()
    again = datapath(session.program.dpid)
    restarted.switch_features(ev(again))
    answer_first_read(restarted, again, name, stats, descs)
    restarted.core.tick(0.0)
    restarted.core.tick(RESYNC_HOLD_S)  # the other switches never came back: it acts on what it knows
    assert len(again.sent) == 3 and restarted.core.sessions[name].state["verified"]


def test_a_port_going_down_modifies_the_groups_that_use_it_and_coming_back_restores_them(app):
    name, session = next(iter(app.core.sessions.items()))  # sw1: ports 9-12 to sw2, 13-16 to sw4
    dp = datapath(session.program.dpid)
    app.switch_features(ev(dp))
    answer_first_read(app, dp, name)
    answer_read_back(app, dp)
    planned = {m.group_id: m for m in dp.sent if isinstance(m, parser.OFPGroupMod)}
    mark = len(dp.sent)
    app.port_status(ev(dp, reason=ofp.OFPPR_MODIFY, desc=port_desc(9, live=False)))
    mods = dp.sent[mark:-1]
    assert isinstance(dp.sent[-1], parser.OFPBarrierRequest) and len(mods) == 4
    for m in mods:
        m.serialize()
        assert (m.command, m.type) == (ofp.OFPGC_MODIFY, ofp.OFPGT_FF)
        assert [b.actions[0].port for b in m.buckets] == [b.actions[0].port for b in planned[m.group_id].buckets
                                                          if b.actions[0].port != 9]
    assert app.core.down == {(name, 9)}
    answer_read_back(app, dp)  # the switch applied them
    mark = len(dp.sent)
    app.port_status(ev(dp, reason=ofp.OFPPR_MODIFY, desc=port_desc(9)))
    restored = dp.sent[mark:-1]
    assert [(m.command, m.group_id) for m in restored] == [(ofp.OFPGC_MODIFY, m.group_id) for m in mods]
    assert all([b.actions[0].port for b in m.buckets] == [b.actions[0].port for b in planned[m.group_id].buckets]
               for m in restored)
    assert app.core.down == set()


def test_a_deleted_port_is_down(app):
    name, session = next(iter(app.core.sessions.items()))
    dp = datapath(session.program.dpid)
    app.switch_features(ev(dp))
    app.port_status(ev(dp, reason=ofp.OFPPR_DELETE, desc=port_desc(9)))
    assert app.core.down == {(name, 9)}


def test_a_bad_read_back_is_a_mismatch(app):
    name, session = next(iter(app.core.sessions.items()))
    dp = datapath(session.program.dpid)
    app.switch_features(ev(dp))
    answer_first_read(app, dp, name)
    app.barrier_reply(ev(dp))
    app.group_desc_reply(ev(dp, body=[]))
    app.flow_stats_reply(ev(dp, body=[], flags=0))
    assert session.state["mismatch"] == (f"{len(session.program.flows) + len(session.program.groups)} rules missing, "
                                         "0 unexpected")


def test_a_punted_probe_records_the_cable(app):
    (a, sa), (b, sb) = list(app.core.sessions.items())[:2]
    port = next(p for p, (peer, _) in app.core.fabric.switches[a].ports.items() if peer == b)
    app.packet_in(ev(datapath(sb.program.dpid), data=bytearray(probe_frame(sa.program.dpid, port))))
    assert app.core.cabling.seen == {f"{a}-eth{port}": b}
