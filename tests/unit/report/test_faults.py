"""The report's Faults section (testbed/report/faults.py) on a hand-written replay run directory.

The fabric is ZCube n=16, k=4, one cable a switch pair (as the example run's): gpu<g> port 1 hangs off the
odd switch sw1 for g in 1, 5, 9, 13 and sw3 for 2, 6, 10, 14; port 2 off the even switch sw2 for g in 1..4
and sw6 for 9..12; sw1:5 is cabled to sw2:5. So 10.1.0.1 -> 10.2.0.2 (sw1 -> sw2) and back, and
10.1.0.5 -> 10.2.0.3, cross the cable sw1:5-sw2:5; 10.1.0.1 -> 10.2.0.9 (sw1 -> sw6) and 10.1.0.2 -> 10.2.0.10
(sw3 -> sw6) do not. The run is live at time dilation 2: run time = wall / 2.

Timeline (wall s): the cable goes down at 4.0 and up at 6.0 (run 2.0 - 3.0); the controller restarts at 8.0
and is back after 1.0 s (run 4.0). Every expected number below is worked out by hand from these rows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fabrics import build_fabric
from fabrics.failover import parse_target
from testbed.report import build_report
from testbed.report import faults as F
from tests.support.report_fixture import write_experiment

CUT = "link sw1:5 sw2:5"
EVENTS = [
    {"t": 1004.0, "target": CUT, "action": "down", "took_s": 0.003, "trace_s": 2.0, "late_ms": 0.5, "wall_s": 4.0},
    {"t": 1006.0, "target": CUT, "action": "up", "took_s": 0.002, "trace_s": 3.0, "late_ms": 0.7, "wall_s": 6.0},
    {"t": 1008.0, "target": "controller", "action": "restart", "took_s": 1.0, "trace_s": 4.0, "late_ms": 0.9,
     "wall_s": 8.0},
]
COLUMNS = "id,request_id,src,dst,src_ip,dst_ip,bytes,received_bytes,scheduled_start,start,first_byte,end," \
          "sender_end,verified,error"
RETRY = ",retried,moved,first_error,sent_src_ip,sent_dst_ip"


def _row(i, src_ip, dst_ip, nbytes, start, end, ok=True, retry=""):
    src, dst = f"gpu{src_ip.split('.')[-1]}", f"gpu{dst_ip.split('.')[-1]}"
    end_text = "" if end is None else end
    return (f"{i},{i},{src},{dst},{src_ip},{dst_ip},{nbytes},{nbytes if ok else 0},{start},{start},{end_text},"
            f"{end_text},{end_text},{ok},{'' if ok else 'never completed'}" + (f",{retry}" if retry else ",,,,,"))


KV = [  # id, src, dst, bytes, start, end
    _row(1, "10.1.0.1", "10.2.0.2", 1000, 3.5, 5.05, retry="True,True,timed out,10.2.0.1,10.1.0.2"),  # affected
    _row(2, "10.2.0.2", "10.1.0.1", 500, 3.9, 4.3),  # affected: the same cable the other way
    _row(3, "10.1.0.1", "10.2.0.9", 500, 3.8, 4.2),  # in flight, another path: a neighbour
    _row(4, "10.1.0.1", "10.2.0.2", 500, 3.0, 3.9),  # the cable's path, done before the cut: a neighbour
    _row(5, "10.1.0.5", "10.2.0.3", 500, 4.5, 6.5),  # started on the dead pair while down
    _row(6, "10.1.0.2", "10.2.0.10", 500, 5.0, 5.3),  # started while down, on a live path: a neighbour
    _row(7, "10.1.0.1", "10.2.0.3", 500, 3.95, None, ok=False),  # affected, never completed
    _row(8, "10.1.0.6", "10.2.0.11", 500, 1.0, 1.2),  # before the neighbours' window [2, 6)
]
EP = [  # + kind, engine, step
    _row(10, "10.1.0.1", "10.2.0.9", 100, 7.9, 8.1) + ",dispatch,decode0,1",  # in flight at the restart
    _row(11, "10.1.0.1", "10.2.0.9", 100, 8.5, 8.6) + ",dispatch,decode0,2",  # while the controller is away
    _row(12, "10.1.0.1", "10.2.0.9", 100, 7.2, 7.5) + ",dispatch,decode0,0",  # a neighbour of the restart
    _row(13, "10.1.0.1", "10.2.0.2", 100, 3.9, 4.1) + ",combine,decode0,0",  # affected by the cut
]
CONFIG = {"fabric": {"kind": "zcube", "gpus": 16, "gpus_per_switch": 4, "cables": 1},
          "replay": {"driver": "live", "time_dilation": 2.0, "speed": 1.5}}


def write_faulty_rep(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "transfers.csv").write_text(COLUMNS + RETRY + "\n" + "\n".join(KV) + "\n")
    (path / "messages.csv").write_text(COLUMNS + RETRY + ",kind,engine,step\n" + "\n".join(EP) + "\n")
    (path / "faults.jsonl").write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    (path / "config.json").write_text(json.dumps(CONFIG))
    (path / "summary.json").write_text(json.dumps({
        "fabric": "zcube", "driver": "live", "time_dilation": 2.0,
        "faults": [{k: e[k] for k in ("trace_s", "target", "action", "late_ms", "wall_s")} for e in EVENTS]}))
    return path


@pytest.fixture
def doc(tmp_path):
    return F.analyze_rep(write_faulty_rep(tmp_path / "rep1"))


def test_the_model_agrees_with_the_hand_drawn_wiring():
    """The module docstring's reading of the wiring, checked once against the model."""
    fabric = build_fabric(**CONFIG["fabric"])
    assert fabric.peer("sw1", 5) == ("sw2", 5)
    assert fabric.switch_of(1, 1) == fabric.switch_of(5, 1) == "sw1"
    assert fabric.switch_of(2, 2) == fabric.switch_of(3, 2) == "sw2"
    assert parse_target(fabric, "link sw2:5").text == CUT


def test_events_and_their_run_times(doc):
    assert doc["wall_per_run_s"] == 2.0
    assert [(e["run_s"], e["wall_s"], e["target"], e["action"], e["late_ms"]) for e in doc["events"]] == [
        (2.0, 4.0, CUT, "down", 0.5), (3.0, 6.0, CUT, "up", 0.7), (4.0, 8.0, "controller", "restart", 0.9)]
    cut, restart = doc["faults"]
    assert (cut["target"], cut["down_wall_s"], cut["up_wall_s"], cut["down_run_s"], cut["up_run_s"]) == \
        (CUT, 4.0, 6.0, 2.0, 3.0)
    assert (restart["kind"], restart["down_wall_s"], restart["up_wall_s"]) == ("controller", 8.0, 9.0)


def test_which_transfers_a_cut_cable_caught(doc):
    kv = doc["faults"][0]["traffic"]["kv"]
    # on the cable and in flight: 1, 2 (the other direction) and 7 (never finished); not 3 (another path),
    # not 4 (done before the cut), not 5 (started after it), not 8 (long before)
    assert sorted(kv["affected_ids"]) == ["1", "2", "7"]
    assert kv["affected"] | {"fct_ms": None, "fct_wall_ms": None} == {
        "n": 3, "failed": 1, "retried": 1, "moved": 1, "fct_ms": None, "fct_wall_ms": None, "surely_crossing": 3}
    assert kv["dead_path_starts"]["n"] == 1  # transfer 5: its only path was dead when it started
    assert kv["neighbours"]["n"] == 3  # 3, 4 and 6; 8 started before the window [2, 6)
    assert doc["faults"][0]["traffic"]["ep"]["affected_ids"] == ["13"]


def test_fct_of_the_caught_against_their_neighbours(doc):
    kv = doc["faults"][0]["traffic"]["kv"]
    # affected and completed: 1.55 s and 0.4 s of wall time; nearest rank of 2: P50 the 1st, P99 the 2nd; in
    # cluster time (wall / the dilation, 2) half as long
    assert kv["affected"]["fct_wall_ms"] == {"p50": 400.0, "p99": 1550.0}
    assert kv["affected"]["fct_ms"] == {"p50": 200.0, "p99": 775.0}
    # neighbours 0.4, 0.9, 0.3 -> sorted 0.3, 0.4, 0.9: P50 the 2nd of 3, P99 the 3rd
    assert kv["neighbours"]["fct_wall_ms"] == {"p50": 400.0, "p99": 900.0}
    assert kv["neighbours"]["fct_ms"] == {"p50": 200.0, "p99": 450.0}
    assert kv["dead_path_starts"]["fct_ms"] == {"p50": 1000.0, "p99": 1000.0}


def test_recovery_after_the_cut(doc):
    # ends 5.05 and 4.3 after the cut at 4.0 (wall): 1.05 s and 0.3 s; the failed one has none; cluster: halved
    kv = doc["faults"][0]["traffic"]["kv"]
    assert kv["after_cut_wall_ms"] == {"p50": 300.0, "p99": 1050.0, "max": 1050.0}
    assert kv["after_cut_ms"] == {"p50": 150.0, "p99": 525.0, "max": 525.0}


def test_the_controller_restart_is_compared_like_a_cut(doc):
    restart = doc["faults"][1]["traffic"]
    ep = restart["ep"]
    assert sorted(ep["affected_ids"]) == ["10", "11"]  # in flight between 8.0 and 9.0
    assert ep["affected"]["fct_wall_ms"] == {"p50": 100.0, "p99": 200.0}  # 0.2 and 0.1 s
    assert ep["affected"]["fct_ms"] == {"p50": 50.0, "p99": 100.0}
    assert ep["neighbours"]["n"] == 1 and ep["neighbours"]["fct_ms"] == {"p50": 150.0, "p99": 150.0}
    assert ep["after_cut_wall_ms"] == {"p50": 100.0, "p99": 100.0, "max": 100.0}  # only 10 was in flight at 8.0
    assert ep["after_cut_ms"] == {"p50": 50.0, "p99": 50.0, "max": 50.0}
    # transfer 7 never finished, so it is in flight at the restart too, but the cut affected it first
    assert restart["kv"]["affected"]["n"] == 0


def test_goodput_per_100_ms_of_run_time(doc):
    g = doc["goodput"]
    assert g["bin_s"] == 0.1 and g["t_s"][25] == 2.5
    # transfer 1's 1000 bytes end at wall 5.05 = run 2.525, alone in its bin of 0.2 wall s: 1000 x 8 / 0.2
    assert g["series"]["KV transfers"][25] == 40000.0
    assert g["series"]["EP messages"][25] == 0.0


def test_roft_paths_may_cross_a_leaf_uplink():
    """ROFT n=16, 4 GPUs a server: leaf1 has one uplink to each of 4 spines, leaf1:5 to spine1. gpu1 (leaf1)
    to gpu2 (leaf3) hashes over all four: one in four crosses the dead uplink, and the others are live."""
    fabric = build_fabric(kind="roft", gpus=16, gpus_per_server=4, radix=8)
    paths = F.Paths(fabric)
    dead = parse_target(fabric, "link leaf1:5").dead(fabric)
    assert paths.crossing("10.1.0.1", "10.2.0.2", dead) == 0.25
    assert not paths.dead_pair("10.1.0.1", "10.2.0.2", dead)
    assert paths.crossing("10.1.0.1", "10.2.0.5", dead) == 0.0  # gpu5 is on leaf1 too: no uplink


def test_a_run_without_faults_has_none(tmp_path):
    rep = write_faulty_rep(tmp_path / "rep1")
    (rep / "faults.jsonl").unlink()
    summary = json.loads((rep / "summary.json").read_text())
    del summary["faults"]
    (rep / "summary.json").write_text(json.dumps(summary))
    assert F.analyze_rep(rep) is None


def test_the_summary_events_stand_in_for_a_missing_faults_jsonl(tmp_path):
    rep = write_faulty_rep(tmp_path / "rep1")
    (rep / "faults.jsonl").unlink()
    doc = F.analyze_rep(rep)
    assert [e["action"] for e in doc["events"]] == ["down", "up", "restart"]
    assert doc["events"][2]["took_s"] is None  # only faults.jsonl records it


def _section(page: Path) -> str:
    html = page.read_text()
    m = re.search(r'<section id="faults">(.*?)</section>', html, re.S)
    return m.group(1) if m else ""


def test_the_section_renders_only_when_a_replay_had_faults(tmp_path):
    plain = write_experiment(tmp_path / "plain")
    page = build_report(plain)
    assert 'id="faults"' not in page.read_text() and 'href="#faults"' not in page.read_text()
    assert "faults" not in json.loads((plain / "summary.json").read_text())

    exp = write_experiment(tmp_path / "faulty")
    rep = exp / "runs" / "zcube" / "rep1"
    summary, config = (json.loads((rep / name).read_text()) for name in ("summary.json", "config.json"))
    write_faulty_rep(rep)  # the fixture's replay files stay; transfers, messages and faults are ours
    (rep / "summary.json").write_text(json.dumps(summary | {"faults": json.loads((rep / "summary.json").read_text())
                                                            ["faults"]}))
    (rep / "config.json").write_text(json.dumps(config | {"fabric": CONFIG["fabric"]}
                                                | {"replay": config["replay"] | CONFIG["replay"]}))
    page = build_report(exp)
    section = _section(page)
    assert "<h2>Faults" in section and 'href="#faults"' in page.read_text()
    assert "link sw1:5 sw2:5 down 2.00-3.00 s" in section  # the fault row's label, in run time
    # FCT P50 / P99 in cluster time (dilation 2), wall beside, affected vs neighbours
    assert "200 / 775 (wall 400 / 1,550)" in section and "200 / 450 (wall 400 / 900) (3)" in section
    assert "150 / 525 / 525 (wall 300 / 1,050 / 1,050)" in section  # done after the cut
    assert "No fault was injected" in section  # ROFT's replay had none
    assert (exp / "figures" / "faults_zcube.png").is_file()
    summary = json.loads((exp / "summary.json").read_text())
    assert summary["faults"]["zcube"][0]["faults"][0]["traffic"]["kv"]["affected"]["n"] == 3
