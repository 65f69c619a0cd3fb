"""bench pfc --hosts, pure parts: the incast's senders over a placement and its planned rows."""

from collections import Counter

import pytest

from common.errors import TestbedError
from fabrics import addressing, build_fabric
from testbed.bench import pfc_hosts
from testbed.emulation.hosts import assign
from traffic.runtime import records


def _placed(kind: str, n: int, hosts: int = 2):
    return assign.assign(build_fabric(kind, gpus=n), [f"ph{i + 1}" for i in range(hosts)])


@pytest.mark.parametrize("kind,n,count", [("roft", 16, 8), ("zcube", 16, 6), ("roft", 32, 5), ("zcube", 32, 9)])
def test_senders_as_asked_half_or_more_on_other_hosts(kind, n, count):
    where = _placed(kind, n)
    who = pfc_hosts.incast_senders(where, (1, 2), count)
    assert len(who) == len(set(who)) == count and 1 not in who
    home = where.gpu_host[1]
    remote = [g for g in who if where.gpu_host[g] != home]
    assert 2 * len(remote) >= count
    assert len(remote) < count  # and some on the victim's host: local pauses too


def test_senders_all_from_other_hosts_when_the_victims_host_runs_out():
    where = _placed("roft", 16)
    home = where.gpu_host[1]
    local = [g for g in where.fabric.gpus() if where.gpu_host[g] == home and g != 1]
    who = pfc_hosts.incast_senders(where, (1, 2), 15)
    assert set(local) <= set(who) and len(who) == 15


def test_one_host_has_no_cross_senders_but_still_gives_the_count():
    where = _placed("roft", 16, hosts=1)
    assert len(pfc_hosts.incast_senders(where, (1, 2), 8)) == 8


@pytest.mark.parametrize("count", [0, 16, 40, -1])
def test_bad_sender_count_is_one_line(count):
    with pytest.raises(TestbedError) as exc:
        pfc_hosts.incast_senders(_placed("roft", 16), (1, 2), count)
    msg = str(exc.value)
    assert "\n" not in msg and f"incast senders {count} is out of range" in msg and "expected 1 .. 15" in msg


@pytest.mark.parametrize("victim", [(17, 2), (0, 1), (3, 3)])
def test_bad_victim_is_one_line(victim):
    with pytest.raises(TestbedError) as exc:
        pfc_hosts.incast_senders(_placed("roft", 16), victim, 4)
    msg = str(exc.value)
    assert "\n" not in msg and f"gpu{victim[0]}:p{victim[1]}" in msg and "expected gpu1 .. gpu16, port 1 or 2" in msg


def test_rows_all_go_to_the_victims_port_from_every_sender():
    fabric = build_fabric("roft", gpus=16)
    senders = [3, 5, 6, 12]
    rows = pfc_hosts.incast_rows(fabric, senders, (1, 2), 10, 3e6)
    assert {r["dst_ip"] for r in rows} == {addressing.ip_of(1, 2)}
    assert {r["dst"] for r in rows} == {"gpu1"}
    assert {r["src"] for r in rows} == {f"gpu{g}" for g in senders}
    assert all(r["src_ip"] == addressing.ip_of(int(r["src"][3:]), 1) for r in rows)  # the other port number
    assert all(0 <= r["start"] < 10 for r in rows)
    per = Counter(r["src"] for r in rows)
    assert len(set(per.values())) == 1  # every sender sends as much


def test_rows_overload_the_victims_link_in_the_plan_format(tmp_path):
    fabric = build_fabric("zcube", gpus=16)
    rows = pfc_hosts.incast_rows(fabric, [2, 4, 7], (1, 2), 8, 3e6, load=2.0, transfer_bytes=100_000)
    assert sum(r["bytes"] for r in rows) >= 2.0 * 3e6 / 8 * 8  # at least twice what the link carries
    assert {r["bytes"] for r in rows} == {100_000}
    paths = records.write_plans(rows, tmp_path, agents=[f"gpu{g}" for g in fabric.gpus()])  # the agents' format
    assert sum(len(records.read_jsonl(p)) for p in paths.values()) == len(rows)


def test_rows_refuse_the_victim_as_a_sender_and_unknown_gpus():
    fabric = build_fabric("roft", gpus=16)
    for senders, word in (([1, 3], "gpu1"), ([3, 99], "gpu99"), ([], "none"), ([3, 3], "twice")):
        with pytest.raises(TestbedError) as exc:
            pfc_hosts.incast_rows(fabric, senders, (1, 2), 4, 3e6)
        assert "\n" not in str(exc.value) and word in str(exc.value) and "expected distinct GPUs" in str(exc.value)


def test_rows_refuse_a_duration_of_zero():
    with pytest.raises(TestbedError, match="incast duration 0 s is not allowed"):
        pfc_hosts.incast_rows(build_fabric("roft", gpus=16), [3], (1, 2), 0, 3e6)


def test_pfc_off_is_refused_before_anything_is_read():
    from pfc.policy import PfcConfig

    with pytest.raises(TestbedError) as exc:
        pfc_hosts.bench("/nonexistent/hosts.yaml", {"kind": "roft", "gpus": 16}, None, PfcConfig(enabled=False))
    assert "without --hosts" in str(exc.value) and "\n" not in str(exc.value)


def test_count_events(tmp_path):
    log = tmp_path / "pfc.txt"
    log.write_text("1 sw1 1 9 1 sw2:1\n2 gpu3 0 1 1 sw1:9\n3 sw1 1 9 0 sw2:1\n")
    assert pfc_hosts.count_events(log) == {"pauses": 2, "resumes": 1, "queues_paused": 2}
    assert pfc_hosts.count_events(tmp_path / "missing")["pauses"] == 0


def test_the_cli_table_shows_both_groups_and_the_counts():
    from testbed.cli.bench.pfc import hosts_table

    summary = {"n": 3, "p50": 0.5, "p99": 1.25, "max": 1.5}
    empty = {"n": 0, "p50": None, "p99": None, "max": None}
    doc = {"fabric": {"kind": "roft", "gpus": 16}, "hosts": [{"host": "ph1"}, {"host": "ph2"}], "tunnel": "vxlan",
           "cables": 64, "cross_host_cables": 16, "rate_bps": 3e6,
           "incast": {"senders": ["gpu2", "gpu5"], "cross_host_senders": ["gpu5"], "victim": "gpu1:p2",
                      "victim_host": "ph1", "seconds": 6},
           "latency": {"local": {"pause": summary, "resume": summary, "reaction": summary},
                       "cross": {"pause": empty, "resume": empty, "reaction": empty}},
           "pauses": 3, "resumes": 3, "queues_paused": 2, "drops": 0, "switch_drops": 0, "nic_drops": 0,
           "transfers": {"planned": 10, "verified": 9}, "logs": "/x",
           "clocks": {"reference": "ph1", "offsets": {"ph2": {"offset_ms": 0.1, "uncertainty_ms": 0.02},
                                                      "ph1": {"offset_ms": 0.0, "uncertainty_ms": 0.0}}}}
    text = "\n".join(hosts_table(doc))
    local = next(ln for ln in text.splitlines() if ln.strip().startswith("local"))
    cross = next(ln for ln in text.splitlines() if ln.strip().startswith("cross"))
    assert local.split()[2:] == ["3", "0.5", "1.25", "1.5"] and cross.split()[2:] == ["0", "-", "-", "-"]
    assert "3 pauses" in text and "drops 0" in text and "verified 9 of 10" in text
    assert text.index("ph1 0.0 ms") < text.index("ph2 0.1 ms")  # hosts in the file's order
