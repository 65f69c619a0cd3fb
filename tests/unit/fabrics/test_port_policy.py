"""Port choice per transfer (routing.plan_ports): the adaptive policy against the
static ones on the 4-to-1 gather of issue 15, hand-computed on ZCube(32, 8).

The gather: prefill GPUs 1-4 (ranks 0-3 of prefill instance 0, server switch
sw2, rail switches sw1, sw3, sw5, sw7) each send B = 1000 bytes to decode GPU 17
(decode rank 0 of a TP-2 instance: port 1 on rail switch sw1, port 2 on its
server switch sw6) at the same time. p1 -> dst p2 goes gpuX:p1 -> rail switch ->
sw6 -> gpu17:p2; p2 -> dst p1 goes gpuX:p2 -> sw2 -> sw1 -> gpu17:p1, so every
p2 -> p1 byte crosses the one server-switch cable sw2->sw1#0 (index 0 of the two
sw2-sw1 cables: zcube_cable(17) = ((17-1) mod 8) div 4 = 0). Whatever the
policy, gpu17's two NIC links carry the 4000 bytes between them, so no policy
can load its busiest link with less than 2000 bytes.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from common import scale
from common.errors import TestbedError
from common.paths import REPO
from fabrics import addressing, build_fabric
from fabrics.routing import (
    POLICIES,
    PortChoice,
    Send,
    link_loads,
    link_name,
    paths,
    plan_ports,
    select_ports,
)

RATE = 3e6  # bit/s: 1000 bytes take 8/3 ms
B = 1000
GATHER = [Send(g, 17, B, 0.0) for g in (1, 2, 3, 4)]


@pytest.fixture(scope="module")
def zcube():
    return build_fabric("zcube", gpus=32, gpus_per_switch=8)


def named(f, loads: dict) -> dict[str, float]:
    return {link_name(f, link): round(v, 6) for link, v in loads.items() if v}


def planned(f, transfers, policy) -> dict[str, float]:
    return named(f, link_loads(f, transfers, plan_ports(transfers, policy, f, RATE)))


def ports(choices) -> list[tuple[int, int]]:
    return [(c.src_port, c.dst_port) for c in choices]


# ----------------------------------------------------- the 4-to-1 gather, per policy
STRIPED_HALVES = {  # select_ports' model of striped: half of every transfer each way
    "gpu1:p1->sw1": 500, "gpu2:p1->sw3": 500, "gpu3:p1->sw5": 500, "gpu4:p1->sw7": 500,
    "sw1->sw6#0": 500, "sw3->sw6#0": 500, "sw5->sw6#0": 500, "sw7->sw6#0": 500, "sw6->gpu17:p2": 2000,
    "gpu1:p2->sw2": 500, "gpu2:p2->sw2": 500, "gpu3:p2->sw2": 500, "gpu4:p2->sw2": 500,
    "sw2->sw1#0": 2000, "sw1->gpu17:p1": 2000,
}
ALL_P1 = {  # rail-out, and striped as the replay plans a one-slice gather (k = 0 for every pair)
    "gpu1:p1->sw1": 1000, "gpu2:p1->sw3": 1000, "gpu3:p1->sw5": 1000, "gpu4:p1->sw7": 1000,
    "sw1->sw6#0": 1000, "sw3->sw6#0": 1000, "sw5->sw6#0": 1000, "sw7->sw6#0": 1000, "sw6->gpu17:p2": 4000,
}
ALL_P2 = {  # server-out, and the planned striped gather of the pair's next request (k = 1)
    "gpu1:p2->sw2": 1000, "gpu2:p2->sw2": 1000, "gpu3:p2->sw2": 1000, "gpu4:p2->sw2": 1000,
    "sw2->sw1#0": 4000, "sw1->gpu17:p1": 4000,
}
PAIR_HASH = {  # crc32("1>17") & 1 = 1, "2>17": 1, "3>17": 0, "4>17": 1
    "gpu1:p2->sw2": 1000, "gpu2:p2->sw2": 1000, "gpu4:p2->sw2": 1000, "sw2->sw1#0": 3000, "sw1->gpu17:p1": 3000,
    "gpu3:p1->sw5": 1000, "sw5->sw6#0": 1000, "sw6->gpu17:p2": 1000,
}
ADAPTIVE = {  # idle senders: ties, broken by striped order shifted by GPU parity: 1, 3 on p1; 2, 4 on p2
    "gpu1:p1->sw1": 1000, "gpu3:p1->sw5": 1000, "sw1->sw6#0": 1000, "sw5->sw6#0": 1000, "sw6->gpu17:p2": 2000,
    "gpu2:p2->sw2": 1000, "gpu4:p2->sw2": 1000, "sw2->sw1#0": 2000, "sw1->gpu17:p1": 2000,
}


def test_gather_link_loads_under_every_policy(zcube):
    f = zcube
    halves = named(f, link_loads(f, GATHER, [select_ports(s.src_gpu, s.dst_gpu, "striped") for s in GATHER]))
    assert halves == STRIPED_HALVES
    assert planned(f, GATHER, "striped") == ALL_P1
    assert planned(f, GATHER, "rail-out") == ALL_P1
    assert planned(f, GATHER, "server-out") == ALL_P2
    assert planned(f, GATHER, "pair-hash") == PAIR_HASH
    assert planned(f, GATHER, "adaptive") == ADAPTIVE
    assert set(POLICIES) == {"striped", "rail-out", "server-out", "pair-hash", "adaptive"}  # a new one gets a row


def test_adaptive_halves_the_hottest_link_of_the_planned_gather(zcube):
    f = zcube
    hottest = {p: max(planned(f, GATHER, p).values()) for p in POLICIES}
    assert hottest == {"striped": 4000, "rail-out": 4000, "server-out": 4000, "pair-hash": 3000, "adaptive": 2000}
    # the server switch's cable towards gpu17's rail switch (issue 15's hotspot)
    assert planned(f, GATHER, "adaptive")["sw2->sw1#0"] == 2000 < PAIR_HASH["sw2->sw1#0"] < ALL_P2["sw2->sw1#0"]
    # select_ports' half-and-half striped already reaches the floor (gpu17's two NIC links share 4000 bytes):
    # adaptive matches it with whole slices, and no policy can go below it
    assert hottest["adaptive"] == max(STRIPED_HALVES.values()) == 4 * B / 2


def test_planned_striped_moves_the_whole_gather_to_the_server_cable_on_the_next_request(zcube):
    f = zcube
    two = GATHER + [Send(g, 17, B, 1.0) for g in (1, 2, 3, 4)]  # the same gather again, 1 s later (idle senders)
    assert ports(plan_ports(two, "striped", f, RATE)) == [(1, 2)] * 4 + [(2, 1)] * 4
    assert planned(f, two[4:], "striped") == ALL_P1  # alone, k restarts at 0: same as the first request
    assert ports(plan_ports(two, "adaptive", f, RATE)) == [(1, 2), (2, 1), (1, 2), (2, 1),
                                                           (2, 1), (1, 2), (2, 1), (1, 2)]


# --------------------------------------------------------------------- the rule
def test_a_sender_with_a_transfer_outstanding_on_port_1_sends_the_next_on_port_2(zcube):
    f = zcube
    # gpu1's first transfer (idle, tie) takes p1 -> gpu17:p2; 1000 bytes at 3 Mbit/s last until 2.67 ms
    for dst in (17, 18):
        for t in (0.0, 0.001):
            assert ports(plan_ports([Send(1, 17, B, 0.0), Send(1, dst, B, t)], "adaptive", f, RATE)) == [(1, 2), (2, 1)]
    # once the first has drained, gpu1 is idle again: the tie order of the new pair (k = 0) gives p1 again
    assert ports(plan_ports([Send(1, 17, B, 0.0), Send(1, 18, B, 0.003)], "adaptive", f, RATE)) == [(1, 2), (1, 2)]
    # an even GPU starts on port 2 and then moves to port 1
    assert ports(plan_ports([Send(2, 17, B, 0.0), Send(2, 18, B, 0.001)], "adaptive", f, RATE)) == [(2, 1), (1, 2)]


def test_equal_nic_backlogs_pick_the_path_sharing_fewer_links_with_the_senders_backlog(zcube):
    f = zcube
    # gpu1: 1000 B to gpu17 on p1 (gpu1:p1->sw1, sw1->sw6#0, sw6->gpu17:p2), 1000 B to gpu25 on p2
    # (gpu1:p2->sw2, sw2->sw1#0, sw1->gpu25:p1). A third to gpu25 at once: both NIC ports hold 1000 B;
    # p1 -> gpu25:p2 (gpu1:p1->sw1, sw1->sw8#0, sw8->gpu25:p2) sums 1000, p2 -> gpu25:p1 sums 3000.
    sends = [Send(1, 17, B, 0.0), Send(1, 25, B, 0.0), Send(1, 25, B, 0.0)]
    assert ports(plan_ports(sends, "adaptive", f, RATE)) == [(1, 2), (2, 1), (1, 2)]
    # striped would send the pair's second transfer p2 -> p1 again, onto the cable and port its first still uses
    assert ports(plan_ports(sends, "striped", f, RATE)) == [(1, 2), (1, 2), (2, 1)]


def test_adaptive_is_deterministic(zcube):
    f = zcube
    sends = [Send(1 + (i * 7) % 16, 17 + (i * 5) % 16, 500 + 37 * (i % 9), (i // 6) * 0.0007) for i in range(300)]
    first = ports(plan_ports(sends, "adaptive", f, RATE))
    assert first == ports(plan_ports(list(sends), "adaptive", build_fabric("zcube", gpus=32, gpus_per_switch=8),
                                     RATE))
    assert {p for p in first} == {(1, 2), (2, 1)}
    code = ("import json; from fabrics import build_fabric; from fabrics.routing import plan_ports;"
            f"s = {json.dumps([list(s) for s in sends])};"
            "f = build_fabric('zcube', gpus=32, gpus_per_switch=8);"
            "print(json.dumps([[c.src_port, c.dst_port] for c in plan_ports(s, 'adaptive', f, 3e6)]))")
    for seed in ("1", "2"):  # another interpreter, another hash seed: the same plan
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                             env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"})
        assert [tuple(p) for p in json.loads(out.stdout)] == first


def test_adaptive_needs_the_fabric_model_and_the_rate(zcube):
    with pytest.raises(TestbedError, match="needs the fabric model"):
        plan_ports(GATHER, "adaptive")
    with pytest.raises(TestbedError, match="needs the fabric model"):
        plan_ports(GATHER, "adaptive", zcube, 0)


def test_path_query_shows_an_idle_senders_adaptive_choice(zcube):
    assert select_ports(3, 17, "adaptive") == [PortChoice(1, 2, 1.0)]
    assert select_ports(4, 17, "adaptive") == [PortChoice(2, 1, 1.0)]
    assert [(p.src_port, p.dst_port, p.hops) for p in paths(zcube, 4, 17, "adaptive")] == [(2, 1, ("sw2", "sw1"))]


# ------------------------------------------------------------------------- ROFT
def test_roft_adaptive_only_picks_the_nic_ports():
    f = build_fabric("roft", gpus=32)
    # gpu1 (rail 0, leaf1) -> gpu18 (rail 1, leaf2): both port pairs cross the same ECMP groups
    # (leaf1's 8 uplinks to 4 spines, then the spine's 2 cables to leaf2); only the NIC links differ
    assert ports(plan_ports([Send(1, 18, B, 0.0), Send(1, 18, B, 0.0)], "adaptive", f, RATE)) == [(1, 2), (2, 1)]
    loads = named(f, link_loads(f, [Send(1, 18, B, 0.0)], [PortChoice(1, 2, 1.0)]))
    assert loads["gpu1:p1->leaf1"] == 1000 and loads["leaf2->gpu18:p2"] == 1000
    up = {k: v for k, v in loads.items() if k.startswith("leaf1->spine")}
    down = {k: v for k, v in loads.items() if k.startswith("spine")}
    assert len(up) == 8 and set(up.values()) == {125.0}  # the hash's expected split over leaf1's 8 uplinks
    assert len(down) == 8 and set(down.values()) == {125.0}  # each spine then splits over its 2 cables to leaf2
    # the same gather as on ZCube: the two NIC links of gpu17 share the 4000 bytes equally
    roft = named(f, link_loads(f, GATHER, plan_ports(GATHER, "adaptive", f, RATE)))
    assert roft["leaf1->gpu17:p1"] == roft["leaf1->gpu17:p2"] == 2000


# ------------------------------------------------------------------ the replay plan
def _tiny_trace(tmp_path):
    # one request of 1000 prompt tokens; Llama-3.1-70B bf16, prefill TP 8 -> decode TP 2: every prefill rank
    # sends 1 KV head of 80 layers, 80 x 128 x 2 (K, V) x 2 bytes x 1000 tokens = 40,960,000 real bytes, which at
    # 400 Gbit/s over 3 Mbit/s (scale 133,333.3) are 307 emulated bytes: 2 slices of at most 200 bytes
    path = tmp_path / "tiny.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [0, 1]}) + "\n")
    return path


def test_prepare_with_adaptive_follows_the_rule_on_a_tiny_schedule(tmp_path):
    from testbed.repetition.drivers.plan import prepare_plan
    from tests.support.settings import repetition

    f = build_fabric("zcube", gpus=16, gpus_per_switch=8)
    trace = {"path": str(_tiny_trace(tmp_path))}
    cfg = repetition({"trace": trace, "serving": {"decode_tp": 2, "chunk_bytes": 200, "policy": "adaptive"}})
    p = prepare_plan(cfg, 16, scale.DEFAULT_RATE_BPS, scale.DEFAULT_MTU, f)
    rows = sorted(p.plan_rows, key=lambda r: r["id"])
    # prefill GPUs 1-4 -> decode GPU 9, 5-8 -> GPU 10, each as 200 + 107 bytes released at once
    assert [(r["src"], r["dst"], r["bytes"]) for r in rows] == [
        (f"gpu{g}", f"gpu{9 if g <= 4 else 10}", b) for g in range(1, 9) for b in (200, 107)]
    # a sender's first slice: ties (idle), odd GPUs p1 -> p2, even p2 -> p1; its second: the other port,
    # since the first still holds 200 bytes on it
    got = [(r["src_ip"], r["dst_ip"]) for r in rows]
    want = []
    for g in range(1, 9):
        first = (1, 2) if g % 2 else (2, 1)
        for sp, dp in (first, first[::-1]):
            want.append((addressing.ip_of(g, sp), addressing.ip_of(9 if g <= 4 else 10, dp)))
    assert got == want
    net = [t for t in p.schedule.transfers if t.src_gpu != t.dst_gpu]
    assert sum(r["bytes"] for r in rows) == sum(t.bytes for t in net) == 8 * 307
    # striped on the same schedule: every sender p1 first (what sends the whole gather one way)
    striped = prepare_plan(repetition({"trace": trace, "serving": {"decode_tp": 2, "chunk_bytes": 200}}), 16,
                      scale.DEFAULT_RATE_BPS, scale.DEFAULT_MTU)
    assert {r["src_ip"].split(".")[1] for r in striped.plan_rows if r["bytes"] == 200} == {"1"}


@pytest.mark.parametrize("kind", ["zcube", "roft"])
def test_prepare_with_adaptive_on_a_trace_window_keeps_every_byte(kind):
    from testbed.repetition.drivers.plan import prepare_plan
    from tests.support.settings import repetition

    f = build_fabric(kind, gpus=16, gpus_per_switch=8)
    cfg = repetition({"trace": {"duration_s": 15}, "serving": {"decode_tp": 2, "policy": "adaptive"}})
    p = prepare_plan(cfg, 16, scale.DEFAULT_RATE_BPS,
                scale.DEFAULT_MTU, f)
    net = [t for t in p.schedule.transfers if t.src_gpu != t.dst_gpu]
    assert len(p.plan_rows) == len(net) > 0
    assert sum(r["bytes"] for r in p.plan_rows) == sum(t.bytes for t in net)
    for r in p.plan_rows:
        src, dst = int(r["src"][3:]), int(r["dst"][3:])
        sp, dp = int(r["src_ip"].split(".")[1]), int(r["dst_ip"].split(".")[1])
        assert (sp, dp) in {(1, 2), (2, 1)}
        assert r["src_ip"] == addressing.ip_of(src, sp) and r["dst_ip"] == addressing.ip_of(dst, dp)
    assert {r["src_ip"].split(".")[1] for r in p.plan_rows} == {"1", "2"}


def test_prepare_refuses_adaptive_without_the_fabric_model():
    from testbed.repetition.drivers.plan import prepare_plan
    from tests.support.settings import repetition

    with pytest.raises(TestbedError, match="adaptive"):
        prepare_plan(repetition({"trace": {"duration_s": 15}, "serving": {"policy": "adaptive"}}), 16,
                scale.DEFAULT_RATE_BPS, scale.DEFAULT_MTU)
