"""The pause daemon's parts that need no kernel: its configuration, netlink sockets and loop gaps."""

import pytest

from fabrics import build_fabric
from fabrics.datapath import DatapathConfig
from pfc import bpfmaps, pfcd
from pfc.policy import PfcConfig, daemon_policy


def _policy(kind: str, pfc: dict, **kwargs) -> dict:
    return daemon_policy(build_fabric(kind, **kwargs), DatapathConfig(), PfcConfig.from_dict(pfc), "/tmp/state")


def test_config_rows_watched_queues_and_windows():
    policy = _policy("zcube", {"enabled": True}, gpus=16, gpus_per_switch=8)
    cfg = pfcd.DaemonConfig.from_policy(policy)
    assert cfg.qids == sorted(policy["queues"]) and [cfg.slot[q] for q in cfg.qids] == list(range(len(cfg.qids)))
    assert cfg.watched == [q for q in cfg.qids if policy["queues"][q]["kind"] == "switch"]
    assert cfg.watched_slots.tolist() == [cfg.slot[q] for q in cfg.watched]
    assert cfg.switch_slot == {}  # static thresholds: no switch pools
    assert cfg.nic_index == {nic: i for i, nic in enumerate(sorted(policy["nics"]))}
    # default thresholds at 3 Mbit/s, MTU 3000, 60 000 B buffers: XOFF = buffer / 2 = 30 000 B, and the window
    # a pause is measured in is 1.5 x the time XOFF takes to drain: 1.5 x 30 000 x 8 / 3e6 s = 0.12 s
    assert {policy["queues"][q]["xoff"] for q in cfg.watched} == {30000}
    assert set(cfg.window_ns[q] for q in cfg.watched) == {120_000_000}
    for qid in cfg.watched:
        assert [f for f, _ in cfg.sources[qid]] == policy["queues"][qid]["feeders"]
        for f, nics in cfg.sources[qid]:
            assert nics == {cfg.nic_index[n] for n in policy["queues"][qid]["sources"].get(f, [])}
    assert cfg.poll_s == 0.0005 and cfg.frame == 3014  # the default 500 us poll; 3000 B + 14 B Ethernet


def test_dynamic_thresholds_get_one_pool_row_per_switch_after_the_queues():
    policy = _policy("roft", {"enabled": True, "dynamic_alpha": 0.5}, gpus=16)
    cfg = pfcd.DaemonConfig.from_policy(policy)
    switches = sorted({policy["queues"][q]["dynamic"]["switch"] for q in cfg.watched})
    assert cfg.switch_slot == {sw: len(cfg.qids) + i for i, sw in enumerate(switches)}
    # ROFT n=16: one leaf per rail with 4 NIC ports and 4 uplinks (8 ports), two spines of 16. A lone queue on
    # leaf1 stops at alpha/(1+alpha) of the pool: 0.5/1.5 x 8 x 60 000 B = 160 000 B; its window is
    # 1.5 x 160 000 x 8 / 3e6 s = 0.64 s. A spine's pool is 16 ports: 320 000 B, 1.28 s.
    assert switches == ["leaf1", "leaf2", "leaf3", "leaf4", "leaf5", "leaf6", "leaf7", "leaf8", "spine1", "spine2"]
    assert policy["queues"]["leaf1:1"]["dynamic"]["xoff_max"] == 160_000
    assert cfg.window_ns["leaf1:1"] == 640_000_000
    assert policy["queues"]["spine1:1"]["dynamic"]["xoff_max"] == 320_000
    assert cfg.window_ns["spine1:1"] == 1_280_000_000


def test_too_many_rows_exit_with_one_line(monkeypatch):
    cfg = pfcd.DaemonConfig.from_policy(_policy("roft", {"enabled": True, "dynamic_alpha": 0.5}, gpus=16))
    cfg.check_fits()
    monkeypatch.setattr(bpfmaps, "MAX_QUEUES", len(cfg.qids))
    with pytest.raises(SystemExit, match=r"queues and \d+ switch pools do not fit the kernel's"):
        cfg.check_fits()


def test_netlink_sockets_one_of_each_per_namespace(monkeypatch):
    opened = []

    def route_socket(timeout=0.0):
        opened.append(timeout)
        return object()

    monkeypatch.setattr(pfcd.tbfmsg, "route_socket", route_socket)
    monkeypatch.setattr(pfcd, "_in_netns", lambda ns, fn: fn())
    socks = pfcd.NetlinkSockets()
    root, gpu = socks.for_namespace(None), socks.for_namespace("tb-gpu1")
    assert socks.for_namespace(None) is root and socks.for_namespace("tb-gpu1") is gpu
    assert opened == [0.0, 0.0, 0.05]  # the root namespace's queues are read through their own socket
    assert list(socks.nonblocking) == [None, "tb-gpu1"] and list(socks.blocking) == ["tb-gpu1"]


def test_loop_gaps_count_only_hold_ups_over_2_ms():
    gaps = pfcd.LoopGaps()
    gaps.note("step", 0.001)
    gaps.note("step", 0.0031, at_ns=5)
    gaps.note("step", 0.0025, at_ns=6)
    gaps.note("sleep", 0.01, at_ns=7)
    assert gaps.count == {"step": 2, "sleep": 1} and gaps.max_ms == {"step": 3.1, "sleep": 10.0}
    assert gaps.lines == ["5 step 3.100\n", "6 step 2.500\n", "7 sleep 10.000\n"]
