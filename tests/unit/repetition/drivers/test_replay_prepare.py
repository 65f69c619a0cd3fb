"""Replay preparation (no root): the per-GPU plans follow the schedule, the
scale model and the port-selection policy."""

from __future__ import annotations

import pytest

from common import scale
from common.errors import TestbedError
from testbed.repetition.drivers.plan import prepare_plan
from tests.support.settings import repetition


def test_plans_carry_every_network_transfer_of_the_schedule():
    p = prepare_plan(repetition({"trace": {"duration_s": 15}}), 16, scale.DEFAULT_RATE_BPS, scale.DEFAULT_MTU)
    net = [t for t in p.schedule.transfers if t.src_gpu != t.dst_gpu]
    assert len(p.plan_rows) == len(net) > 0
    assert sum(r["bytes"] for r in p.plan_rows) == sum(t.bytes for t in net)
    assert len({r["id"] for r in p.plan_rows}) == len(p.plan_rows)
    assert min(r["start"] for r in p.plan_rows) == 0.0
    assert p.requests == len(p.schedule.requests)


def test_striped_policy_alternates_the_nic_ports_of_a_pair():
    p = prepare_plan(repetition({"trace": {"duration_s": 15}}), 16, scale.DEFAULT_RATE_BPS, scale.DEFAULT_MTU)
    by_pair: dict = {}
    for r in sorted(p.plan_rows, key=lambda r: r["id"]):
        by_pair.setdefault((r["src"], r["dst"]), []).append((r["src_ip"].split(".")[1], r["dst_ip"].split(".")[1]))
    pair, ports = next((k, v) for k, v in by_pair.items() if len(v) >= 2)
    assert ports[0] == ("1", "2") and ports[1] == ("2", "1"), (pair, ports)


def test_rail_out_policy_uses_port_1_only():
    cfg = repetition({"trace": {"duration_s": 15}, "serving": {"policy": "rail-out"}})
    p = prepare_plan(cfg, 16, scale.DEFAULT_RATE_BPS, scale.DEFAULT_MTU)
    assert {r["src_ip"].split(".")[1] for r in p.plan_rows} == {"1"}


def test_bytes_are_scaled_by_the_one_scale_model():
    slow = prepare_plan(repetition({"trace": {"duration_s": 15}}), 16, 3e6, 3000)
    fast = prepare_plan(repetition({"trace": {"duration_s": 15}}), 16, 6e6, 3000)
    assert sum(r["bytes"] for r in fast.plan_rows) == pytest.approx(2 * sum(r["bytes"] for r in slow.plan_rows),
                                                                      rel=0.01)


@pytest.mark.parametrize("doc, key, word", [
    ({"serving": {"policy": "spray"}}, "serving.policy", "spray"),
    ({"trace": {"duration_s": 0}}, "trace.duration_s", "> 0"),
    ({"trace": {"speed": -1}}, "trace.speed", "> 0"),
    ({"trace": {"path": "/nonexistent.jsonl"}}, "trace.path", "nonexistent"),
    ({"trace": {"path": "/"}}, "trace.path", "is a directory"),
    ({"serving": {"arrivals": "closed"}}, "serving.arrivals", "need serving.driver live"),
    ({"link": {"time_dilation": 2}}, "link.time_dilation", "needs serving.driver live"),
])
def test_bad_replay_settings_are_one_clear_error_at_their_key(doc, key, word):
    with pytest.raises(TestbedError, match=word) as info:
        repetition(doc)
    assert str(info.value).startswith(f"test: {key}")


def test_standing_for_a_slower_real_link_puts_more_bytes_on_the_emulated_one():
    at400 = prepare_plan(repetition({"trace": {"duration_s": 15}}), 16, 3e6, 3000)
    at100 = prepare_plan(repetition({"trace": {"duration_s": 15}, "link": {"represents": 100e9}}), 16, 3e6, 3000)
    assert {r["start"] for r in at100.plan_rows} == {r["start"] for r in at400.plan_rows}  # times stay real
    assert sum(r["bytes"] for r in at100.plan_rows) == pytest.approx(4 * sum(r["bytes"] for r in at400.plan_rows),
                                                                     rel=0.02)


def test_a_non_positive_represents_is_refused_in_one_line():
    with pytest.raises(TestbedError, match=r"link.represents: must be > 0 \(got 0\)"):
        repetition({"link": {"represents": 0}})


def test_an_overloaded_window_is_flagged_and_the_operating_point_is_written(tmp_path):
    from testbed.repetition.writeup import write_operating_point

    hot = prepare_plan(repetition({"trace": {"speed": 2}, "serving": {"decode_tp": 2}}), 32, 3e6, 3000)
    assert hot.warnings and hot.warnings[0].startswith("the cluster is overloaded; TTFT measures the queue")
    kept_up = prepare_plan(repetition({"trace": {"speed": 1.5}, "serving": {"decode_tp": 2}}), 32, 3e6, 3000)
    assert not any("overloaded" in w for w in kept_up.warnings)
    doc = write_operating_point(tmp_path, kept_up.operating_point)
    assert set(doc["prefill_utilization"]) == {"0", "1"}
    assert all(0.5 < u < 0.9 for u in doc["prefill_utilization"].values()), doc
    header = (tmp_path / "instances.csv").read_text().splitlines()[0]
    assert header.startswith("instance,kind,utilization")
    assert len((tmp_path / "queue.csv").read_text().splitlines()) > 100
