"""testbed.bench.fidelity without a fabric: the permutation it picks, the ideal it compares TCP with, how a
flow and a pattern are summarised and when the targets are met (values worked out by hand)."""

from __future__ import annotations

import pytest

from fabrics import build_fabric
from testbed.bench import fidelity

Z16 = build_fabric("zcube", gpus=16, gpus_per_switch=8)


def test_payload_efficiency_is_tcp_payload_per_wire_byte():
    # IPv4 20 + TCP 20 + timestamps 12 = 52 B of headers; Ethernet 14 B: (1500-52)/(1500+14) = 1448/1514
    assert fidelity.payload_efficiency(1500) == 1448 / 1514
    assert fidelity.payload_efficiency(3000) == 2948 / 3014


def test_the_permutation_of_zcube_16_is_shift_1_at_full_rate():
    """Shift 1 already gives every flow its own links (see test_fabric's fidelity test for the cables), so the
    search stops there: i -> i+1, both NIC ports, every ideal the link rate."""
    pairs, ideal = fidelity.permutation(Z16, 3e6)
    assert pairs == [(i, i % 16 + 1) for i in range(1, 17)]
    assert ideal == {f"{i}>{i % 16 + 1}:p{sp}": 3e6 for i in range(1, 17) for sp in (1, 2)}


def test_an_ecmp_fabric_takes_zcubes_pairs_and_the_collision_free_ideal():
    pairs, ideal = fidelity.permutation(build_fabric("roft", gpus=16), 2e6)
    assert pairs == [(i, i % 16 + 1) for i in range(1, 17)]
    assert set(ideal.values()) == {2e6} and len(ideal) == 32


def test_ideal_rates_share_the_destinations_port():
    """gpu1:p1 and gpu3:p1 into gpu9:p2: both on sw1, both on cable 0 (sw1:13) into sw4:1 -> 1.5 Mbit/s each.
    On ROFT only the NIC and the last port count (a perfect hash): the same 1.5 each at gpu9's leaf port."""
    flows = {"a": ((1, 1), (9, 2)), "b": ((3, 1), (9, 2))}
    assert fidelity.ideal_rates(Z16, flows, 3e6) == {"a": 1.5e6, "b": 1.5e6}
    assert fidelity.ideal_rates(build_fabric("roft", gpus=16), flows, 3e6) == {"a": 1.5e6, "b": 1.5e6}


def test_a_flow_row_rounds_and_a_zero_ideal_gives_ratio_0():
    row = fidelity._flow_row(Z16, "permutation", 3, 1, 4, 2_812_345.6, 2_934_306.57, 7, True)
    assert row == {"src": "gpu3", "dst": "gpu4", "src_port": 1, "dst_port": 2, "pattern": "permutation",
                   "goodput_bps": 2_812_346, "ideal_bps": 2_934_307, "ratio": 0.9584,  # 2812345.6/2934306.57
                   "retransmits": 7, "ideal_known": True}
    assert fidelity._flow_row(Z16, "all-to-all", 1, 2, 5, 10.0, 0.0, None, False)["ratio"] == 0.0


CPU_OK = {"ovs_vswitchd_cores": 0.5, "machine_busy_fraction": 0.6}


def test_a_pattern_summary():
    flows = [{"ratio": r, "goodput_bps": g, "retransmits": t, "ideal_known": True}
             for r, g, t in ((0.9, 100, 1), (1.0, 200, None), (0.8, 300, 4))]
    s = fidelity._pattern_summary(flows, CPU_OK, None)
    assert s == {"median_ratio": 0.9, "min_ratio": 0.8, "aggregate_goodput_bps": 600, "flows": 3,
                 "retransmits": 5, "ideal_known": True, "cpu": CPU_OK, "cpu_saturated": False}
    assert fidelity._pattern_summary(flows, CPU_OK, 42)["retransmits"] == 42  # the namespace's own count


@pytest.mark.parametrize("cpu,saturated", [
    ({"ovs_vswitchd_cores": 0.95, "machine_busy_fraction": 0.1}, True),  # the PMD's one core is full
    ({"ovs_vswitchd_cores": 0.94, "machine_busy_fraction": 0.97}, True),  # under 3 % of the machine idle
    ({"ovs_vswitchd_cores": 0.94, "machine_busy_fraction": 0.96}, False),
])
def test_saturation(cpu, saturated):
    assert fidelity._saturated(cpu) is saturated


@pytest.mark.parametrize("median,low,sat,known,met", [
    (0.95, 0.85, False, True, True), (0.949, 0.9, False, True, False), (0.99, 0.849, False, True, False),
    (0.99, 0.99, True, True, False), (0.99, 0.99, False, False, None)])
def test_targets_are_median_95_and_min_85_percent_without_saturation(median, low, sat, known, met):
    doc = {"summary": {"permutation": {"median_ratio": median, "min_ratio": low, "cpu_saturated": sat,
                                       "ideal_known": known}}}
    assert fidelity.targets_met(doc) is met


def test_an_unknown_ecmp_mode_is_one_line():
    with pytest.raises(fidelity.TestbedError, match="ecmp mode 'random' is unknown: expected spread, hashed"):
        fidelity.ecmp_paths(build_fabric("roft", gpus=16), [(1, 2)], 3e6, "random")
