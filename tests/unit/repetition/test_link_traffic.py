"""What crosses each link (testbed.repetition.link_traffic) on hand-built cases, and the report's hottest-links
table with and without link_traffic.csv. No root, no fabric.

Expected links are worked out by hand from the wiring rules (docs/fabrics.md), not from the
product's routing:

ZCube(n=16, k=8), 4 parallel cables per odd-even pair (k^2/n): switches sw1..sw4, odd sw1 and sw3.
GPU i's port 1 goes to odd switch ((i-1) mod 2)*2+1 (odd GPUs on sw1, even on sw3), port 2 to even
switch ceil(i/8)*2 (GPUs 1-8 on sw2, 9-16 on sw4). OpenFlow ports are handed out in wiring order:
every GPU's port 1 (i = 1..16), then every port 2, then the cables odd x even (sw1-sw2, sw1-sw4,
sw3-sw2, sw3-sw4), 4 each. So sw1 holds GPUs 1, 3, 5, ... on ports 1-8 (gpu9 on port 5) and its cables
to sw2 on ports 9-12, to sw4 on 13-16; sw2 holds GPUs 1-8 on ports 1-8, cables to sw1 on 9-12; sw4
holds GPUs 9-16 on ports 1-8. Among parallel cables the one with index ((gpu-1) mod k) div (n/k) mod
cables is used: for gpu9, (8 mod 8) div 2 = 0, the first cable.

ROFT(n=16), radix 16: 2 servers, one leaf per rail (leaf r: GPUs r and r+8, both ports each, on
ports 1-4 in GPU order), 2 spines, 2 cables per leaf-spine pair: leaf ports 5-6 to spine1, 7-8 to
spine2; spine ports 2r-1, 2r to leaf r.
"""

from __future__ import annotations

import json

import pytest

from common.errors import TestbedError
from fabrics import build_fabric
from fabrics.datapath import plan_datapath
from testbed.repetition import link_traffic as lt
from testbed.report import build_report, hot_links
from testbed.report.load import load_experiment
from tests.support.report_fixture import write_experiment


@pytest.fixture(scope="module")
def zcube():
    return build_fabric("zcube", 16, 8)


@pytest.fixture(scope="module")
def roft():
    return build_fabric("roft", 16)


def kv(src_ip, dst_ip, nbytes, verified=True, received=None):
    src, dst = int(src_ip.split(".")[3]), int(dst_ip.split(".")[3])
    return {"src": f"gpu{src}", "dst": f"gpu{dst}", "src_ip": src_ip, "dst_ip": dst_ip, "bytes": nbytes,
            "received_bytes": nbytes if received is None else received, "verified": verified}


def ep(src_ip, dst_ip, nbytes, kind="dispatch", engine="prefill0"):
    return kv(src_ip, dst_ip, nbytes) | {"kind": kind, "engine": engine}


def carrying(loads):
    """queue -> (towards, kv, ep, share) of every link that carries anything."""
    return {q: (x.towards, x.kv_bytes, x.ep_bytes, x.share) for q, x in loads.items() if x.bytes}


def test_queue_names_are_the_datapath_queues_of_links_csv(zcube, roft):
    for fabric in (zcube, roft):
        queues = {q.qid: q.towards for q in plan_datapath(fabric).queues}
        assert {q: x.towards for q, x in lt.all_links(fabric).items()} == queues


def test_zcube_kv_transfer_crosses_the_links_worked_out_by_hand(zcube):
    # gpu1 port 1 (sw1 port 1) -> gpu9 port 2 (sw4 port 1): sw1's first cable to sw4 is its port 13
    loads = lt.link_traffic(zcube, [kv("10.1.0.1", "10.2.0.9", 5000)])
    assert carrying(loads) == {"gpu1:p1": ("sw1", 5000, 0, "exact"),
                               "sw1:13": ("sw4", 5000, 0, "exact"),
                               "sw4:1": ("gpu9:p2", 5000, 0, "exact")}
    # the other port pair: gpu1 port 2 (sw2) -> gpu9 port 1 (sw1 port 5): sw2's first cable to sw1 is port 9
    loads = lt.link_traffic(zcube, [kv("10.2.0.1", "10.1.0.9", 700)])
    assert carrying(loads) == {"gpu1:p2": ("sw2", 700, 0, "exact"),
                               "sw2:9": ("sw1", 700, 0, "exact"),
                               "sw1:5": ("gpu9:p1", 700, 0, "exact")}


def test_roft_same_rail_stays_on_the_leaf(roft):
    loads = lt.link_traffic(roft, [kv("10.1.0.1", "10.2.0.9", 3000)])
    assert carrying(loads) == {"gpu1:p1": ("leaf1", 3000, 0, "exact"), "leaf1:4": ("gpu9:p2", 3000, 0, "exact")}


def test_roft_cross_rail_bytes_split_over_the_spines_and_are_expected(roft):
    # gpu1 port 1 (leaf1) -> gpu2 port 2 (leaf2 port 2): 4 uplinks of leaf1, then 2 cables of each spine to leaf2
    loads = lt.link_traffic(roft, [kv("10.1.0.1", "10.2.0.2", 4000)])
    assert carrying(loads) == {
        "gpu1:p1": ("leaf1", 4000, 0, "exact"),
        "leaf1:5": ("spine1", 1000, 0, "expected"), "leaf1:6": ("spine1", 1000, 0, "expected"),
        "leaf1:7": ("spine2", 1000, 0, "expected"), "leaf1:8": ("spine2", 1000, 0, "expected"),
        "spine1:3": ("leaf2", 1000, 0, "expected"), "spine1:4": ("leaf2", 1000, 0, "expected"),
        "spine2:3": ("leaf2", 1000, 0, "expected"), "spine2:4": ("leaf2", 1000, 0, "expected"),
        "leaf2:2": ("gpu2:p2", 4000, 0, "exact")}


def test_a_link_with_exact_and_split_bytes_is_expected(roft):
    # same-rail gpu9 -> gpu1 leaves leaf1 on port 2 (exact); cross-rail gpu2 -> gpu1 arrives there too (its
    # spine is unknown but its last hop is not): exact. A spine port with any split bytes is expected.
    loads = lt.link_traffic(roft, [kv("10.1.0.9", "10.2.0.1", 100), kv("10.1.0.2", "10.2.0.1", 400)])
    assert loads["leaf1:2"].share == "exact" and loads["leaf1:2"].kv_bytes == 500
    assert loads["spine1:1"].share == "expected" and loads["spine1:1"].kv_bytes == pytest.approx(100)


def test_kv_and_ep_bytes_are_accounted_apart_with_their_contributors(zcube):
    rows = [kv("10.1.0.1", "10.2.0.9", 1000), kv("10.1.0.3", "10.2.0.9", 1000),
            ep("10.1.0.1", "10.2.0.9", 6000, "dispatch", "prefill0"),
            ep("10.1.0.1", "10.2.0.9", 2000, "combine", "decode0"),
            ep("10.1.0.1", "10.2.0.9", 500, "combine", "prefill0")]
    loads = lt.link_traffic(zcube, rows)
    hop = loads["sw4:1"]  # gpu9 port 2's switch port: every row arrives there
    assert (hop.kv_bytes, hop.ep_bytes) == (2000, 8500)
    assert hop.by_label == {"KV s1 -> s2": 2000, "EP prefill0 dispatch": 6000, "EP decode0 combine": 2000,
                            "EP prefill0 combine": 500}
    # two per class, biggest first, as shares of the link's model bytes
    assert hop.top_text() == "EP prefill0 dispatch 57%; EP decode0 combine 19%; KV s1 -> s2 19%"
    assert (loads["gpu3:p1"].kv_bytes, loads["gpu3:p1"].ep_bytes) == (1000, 0)
    assert (loads["gpu1:p1"].kv_bytes, loads["gpu1:p1"].ep_bytes) == (1000, 8500)


def test_servers_follow_gpus_per_server(zcube):
    loads = lt.link_traffic(zcube, [kv("10.1.0.1", "10.2.0.9", 10)], gpus_per_server=4)
    assert loads["sw4:1"].by_label == {"KV s1 -> s3": 10}


def test_failed_rows_count_what_arrived_and_rows_without_addresses_nothing(zcube):
    rows = [kv("10.1.0.1", "10.2.0.9", 5000, verified=False, received=1200),
            kv("10.1.0.1", "10.2.0.9", 5000, verified="False", received=""),
            {"src": "gpu1", "dst": "gpu9", "src_ip": "", "dst_ip": "", "bytes": 9, "verified": "True"}]
    assert lt.link_traffic(zcube, rows)["sw4:1"].kv_bytes == 1200


def test_an_address_outside_the_fabric_is_one_clear_error(zcube):
    with pytest.raises(TestbedError, match="10.1.0.40"):
        lt.link_traffic(zcube, [kv("10.1.0.1", "10.1.0.40", 10)])


def _run_dir(path, fabric_cfg, rows, links):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"fabric": fabric_cfg, "replay": {"gpus_per_server": 8}}))
    head = "id,src,dst,src_ip,dst_ip,bytes,received_bytes,verified,kind,engine,step\n"
    (path / "transfers.csv").write_text(head + "".join(
        f"{i},{r['src']},{r['dst']},{r['src_ip']},{r['dst_ip']},{r['bytes']},{r['bytes']},True,,,\n"
        for i, r in enumerate(rows) if "kind" not in r))
    (path / "messages.csv").write_text(head + "".join(
        f"{i},{r['src']},{r['dst']},{r['src_ip']},{r['dst_ip']},{r['bytes']},{r['bytes']},True,{r['kind']},"
        f"{r['engine']},3\n" for i, r in enumerate(rows) if "kind" in r))
    (path / "links.csv").write_text("queue,towards,bytes,utilization\n" + "".join(
        f"{q},{t},{b},0.1\n" for q, t, b in links))
    return path


def test_run_dir_table_has_the_ratio_to_links_csv(tmp_path, zcube):
    rows = [kv("10.1.0.1", "10.2.0.9", 950), ep("10.1.0.1", "10.2.0.9", 950)]
    run = _run_dir(tmp_path / "rep1", {"kind": "zcube", "gpus": 16, "gpus_per_switch": 8, "cables": 4}, rows,
                   [("gpu1:p1", "sw1", 2000), ("sw1:13", "sw4", 2000), ("sw4:1", "gpu9:p2", 2000),
                    ("sw1:1", "gpu1:p1", 300)])
    table = {r["queue"]: r for r in lt.for_run_dir(run)}
    assert table["sw1:13"] == {"queue": "sw1:13", "towards": "sw4", "kv_bytes": 950, "ep_bytes": 950,
                                   "share": "exact", "top": "EP prefill0 dispatch 50%; KV s1 -> s2 50%",
                                   "measured_bytes": 2000, "model_vs_measured": 0.95}
    assert table["sw1:1"]["model_vs_measured"] == 0.0 and table["sw1:1"]["top"] == ""
    assert table["sw2:1"]["measured_bytes"] is None and table["sw2:1"]["model_vs_measured"] is None
    assert [r["queue"] for r in lt.hottest(list(table.values()), 3)] == ["gpu1:p1", "sw1:13", "sw4:1"]
    # what the replay writes: the same table from the merged rows, into link_traffic.csv
    out = lt.write_run(run, zcube, rows)
    assert out == run / "link_traffic.csv"
    lines = out.read_text().splitlines()
    assert lines[0] == ",".join(lt.COLUMNS)
    assert "sw1:13,sw4,950,950,exact,EP prefill0 dispatch 50%; KV s1 -> s2 50%,2000,0.95" in lines
    assert len(lines) == 1 + len(plan_datapath(zcube).queues)


# ------------------------------------------------------------------------- the report
def _with_link_traffic(root):
    for rep in sorted((root / "runs").glob("*/rep*")):
        lt.write_csv(rep / lt.FILE, lt.for_run_dir(rep))
    return root


def test_report_shows_what_crosses_the_hottest_links(tmp_path):
    root = _with_link_traffic(write_experiment(tmp_path / "exp", reps=2))
    exp = load_experiment(root)
    for f in ("zcube", "roft"):
        rows = hot_links.hottest(exp, f)
        assert len(rows) == hot_links.HOT_LINKS
        assert [r["bytes"] for r in rows] == sorted((r["bytes"] for r in rows), reverse=True)
        assert all(r["kv_bytes"] is not None and r["top_rep"] == 1 for r in rows)
    html = build_report(root).read_text()
    assert "the 6 hottest links and what crosses them" in html and "KV share" in html
    assert "KV s1 -&gt; s2" in html  # the fixture's transfers go from GPUs 1-8 to 9-16
    assert hot_links.MISSING not in html


def test_report_without_link_traffic_csv_still_renders_the_table(tmp_path):
    root = write_experiment(tmp_path / "exp", reps=1)
    html = build_report(root).read_text()
    assert "the 6 hottest links and what crosses them" in html
    assert html.count(hot_links.MISSING) >= 2 * hot_links.HOT_LINKS  # every row of both fabrics says so


def test_report_medians_only_over_repetitions_with_the_file(tmp_path):
    root = write_experiment(tmp_path / "exp", reps=2)
    rep2 = root / "runs" / "zcube" / "rep2"
    lt.write_csv(rep2 / lt.FILE, lt.for_run_dir(rep2))
    rows = hot_links.hottest(load_experiment(root), "zcube")
    assert all(r["top_rep"] == 2 for r in rows)
    section = hot_links.section(load_experiment(root))
    assert "what crosses it: rep2" in section and hot_links.MISSING in section  # ROFT has none
