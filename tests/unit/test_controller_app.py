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


def answer_read_back(app, dp):
    """Reply to the barrier and the stats requests as a switch holding what was sent (flows in two parts)."""
    flows = [m for m in dp.sent if isinstance(m, parser.OFPFlowMod) and m.command == ofp.OFPFC_ADD]
    groups = [m for m in dp.sent if isinstance(m, parser.OFPGroupMod) and m.command == ofp.OFPGC_ADD]
    app.barrier_reply(ev(dp))
    app.group_desc_reply(ev(dp, body=[parser.OFPGroupDescStats(g.type, g.group_id, g.buckets) for g in groups]))
    stats = [parser.OFPFlowStats(priority=m.priority, match=m.match, instructions=m.instructions, packet_count=0)
             for m in flows]
    app.flow_stats_reply(ev(dp, body=stats[:3], flags=ofp.OFPMPF_REPLY_MORE))
    app.flow_stats_reply(ev(dp, body=stats[3:], flags=0))


def test_features_program_the_switch_and_the_replies_verify_it(app):
    name, session = next(iter(app.core.sessions.items()))
    dp = datapath(session.program.dpid)
    app.switch_features(ev(dp))
    assert isinstance(dp.sent[0], parser.OFPFlowMod) and dp.sent[0].command == ofp.OFPFC_DELETE
    assert isinstance(dp.sent[-1], parser.OFPBarrierRequest)
    answer_read_back(app, dp)
    assert any(isinstance(m, parser.OFPGroupDescStatsRequest) for m in dp.sent)
    assert session.state["verified"] and session.state["flows_read"] == len(session.program.flows)
    app.switch_gone(SimpleNamespace(datapath=dp))
    assert not session.state["connected"] and not session.state["verified"]


def test_a_bad_read_back_is_a_mismatch(app):
    session = next(iter(app.core.sessions.values()))
    dp = datapath(session.program.dpid)
    app.switch_features(ev(dp))
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
