"""testbed.repetition.drivers.live: the coordinator's config and the exchange-vs-ideal figure (no fabric)."""

import pytest

from common.paths import AZURE_TRACE
from fabrics import build_fabric
from testbed.repetition.drivers import live, live_summary
from tests.support.settings import repetition
from traffic.runtime import coordinator


def cfg(**serving):
    return repetition({"trace": {"path": str(AZURE_TRACE), "duration_s": 4}, "link": {"time_dilation": 4},
                       "gpus": 16, "gpus_per_switch": 4, "gpus_per_server": 4,
                       "serving": {"driver": "live", "arrivals": "closed", "concurrency": 16, "model": "glm-5"}
                       | serving})


def test_prepare_live_groups_each_kind_into_one_ep_group_and_scales_bytes_by_dilation():
    setup = live.prepare_live(cfg(), 16, 3e6)
    assert setup.engines == {"prefill": [list(range(1, 9))], "decode": [list(range(9, 17))]}
    assert setup.bytes_scale == pytest.approx(400e9 / 3e6 / 4)
    c = setup.config
    assert c["policy"] == "striped" and "choices" not in c  # a pair's port pairs: fabrics.routing.port_pairs
    assert c["ips"]["3"] == ["10.1.0.3", "10.2.0.3"] and c["dilation"] == 4
    spec = coordinator.spec_from_config(c)  # the coordinator rebuilds the same cluster
    assert [[u.gpus for u in e] for e in spec.decode] == [[(g,) for g in range(9, 17)]]
    assert spec.gpus_per_server == 4 and spec.arrivals == "closed"


def test_a_dense_model_keeps_its_tp_instances_as_engines():
    setup = live.prepare_live(cfg(model="llama-3.1-8b", prefill_tp=4, decode_tp=2), 16, 3e6)
    assert setup.engines["prefill"] == [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert setup.engines["decode"] == [[9, 10], [11, 12], [13, 14], [15, 16]]


ZCUBE = build_fabric("zcube", gpus=16, gpus_per_switch=8)  # p1 -> p2 between servers: NIC, switch, switch
ROFT = build_fabric("roft", gpus=16, gpus_per_switch=8, gpus_per_server=8)


def test_exchange_vs_ideal_of_one_packet_is_serialization_plus_store_and_forward():
    # one full packet (2948 B payload at MTU 3000) A -> B: 3038 B on the wire at 2 x 3 Mbit/s = 4.051 ms,
    # plus two more links of store-and-forward at 3 Mbit/s = 16.203 ms: ideal 20.253 ms
    msg = {"verified": True, "step": 1, "engine": "decode0", "kind": "dispatch", "src": "gpu1", "dst": "gpu9",
           "bytes": 2948, "start": 1.0, "end": 1.0 + 2 * 0.0202533, "src_ip": "10.1.0.1", "dst_ip": "10.2.0.9"}
    assert live_summary.exchange_vs_ideal([msg], 3e6, 3000, ZCUBE) == [pytest.approx(2.0, rel=1e-3)]


def test_the_ideals_path_is_the_routing_models():
    """ROFT: rail 1 to rail 1 of the other server stays on its leaf (2 links), rail 1 to rail 2 crosses a
    spine (4 links): the store-and-forward term has 1 or 3 more packets."""
    msg = {"verified": True, "step": 1, "engine": "decode0", "kind": "dispatch", "src": "gpu1", "bytes": 2948,
           "start": 0.0, "end": 1.0, "src_ip": "10.1.0.1"}
    rail, cross = (msg | {"dst": f"gpu{g}", "dst_ip": f"10.2.0.{g}"} for g in (9, 10))
    assert live_summary.longest_path(ROFT, [rail]) == 2 and live_summary.longest_path(ROFT, [rail, cross]) == 4
    wire = 3038 * 8
    (same,) = live_summary.exchange_vs_ideal([rail], 3e6, 3000, ROFT)
    assert same == pytest.approx(1.0 / (wire / 6e6 + 1 * wire / 3e6))


def test_exchange_vs_ideal_takes_the_busiest_gpu_of_each_phase():
    base = {"verified": True, "engine": "decode0", "bytes": 1000, "start": 0.0, "dst_ip": "10.2.0.9"}
    ms = [base | {"step": 1, "kind": "combine", "src": f"gpu{i}", "dst": "gpu9", "end": 0.1, "src_ip": f"10.1.0.{i}"}
          for i in (1, 2, 3)]
    ms.append(base | {"step": 2, "kind": "combine", "src": "gpu1", "dst": "gpu9", "end": 0.1, "src_ip": "10.1.0.1"})
    one, three = sorted(live_summary.exchange_vs_ideal(ms, 3e6, 3000, ZCUBE), reverse=True)
    # 1000 B is one packet: 1090 B = 8 720 bits on the wire. Step 2, one message: 8 720 / 6e6 = 1.4533 ms through
    # the two NIC ports, + 2 x 8 720 / 3e6 = 5.8133 ms store-and-forward: 7.2667 ms; 0.1 s / 7.2667 ms = 13.76.
    # Step 1, three into gpu9: 3 x 8 720 / 6e6 = 4.36 ms + 5.8133 ms = 10.1733 ms; 0.1 s / that = 9.83.
    assert one == pytest.approx(13.761467889908257, rel=1e-9)
    assert three == pytest.approx(9.829619921363041, rel=1e-9)


def test_a_named_layout_sets_the_engines_and_the_coordinator_rebuilds_them():
    # glm5-recipe on 16 GPUs in servers of 4: two TP4 prefill instances (servers 1, 2), one EP8 decode group
    setup = live.prepare_live(cfg(layout="glm5-recipe", prefill_chunk_tokens=8192), 16, 3e6)
    assert setup.engines == {"prefill": [[1, 2, 3, 4], [5, 6, 7, 8]], "decode": [list(range(9, 17))]}
    assert setup.layout == {"name": "glm5-recipe", "prefill": {"engines": 2, "gpus": 4, "form": "tp"},
                            "decode": {"engines": 1, "gpus": 8, "form": "ep"}}
    spec = coordinator.spec_from_config(setup.config)
    assert [[u.gpus for u in e] for e in spec.prefill] == [[(1, 2, 3, 4)], [(5, 6, 7, 8)]]
    assert spec.prefill_chunk_tokens == 8192


def test_start_lateness_counts_each_message_once():
    # Two KV rows and one EP row, starts 1 ms, 3 ms and 2 ms late; one never started. Before, EP
    # messages were counted twice (rows + messages), giving four values.
    rows = [{"kind": "kv", "start": 1.001, "scheduled_start": 1.0},
            {"kind": "kv", "start": 2.003, "scheduled_start": 2.0},
            {"kind": "dispatch", "start": 3.002, "scheduled_start": 3.0},
            {"kind": "combine", "start": None, "scheduled_start": 4.0}]
    assert live_summary.start_lateness(rows) == [pytest.approx(0.001), pytest.approx(0.003), pytest.approx(0.002)]


def test_check_live_finds_what_the_cluster_would_fail_on_without_running_it():
    from dataclasses import replace

    from common.errors import TestbedError

    good = cfg(decode_memory=True, prefix_cache=True)
    assert live.check_live(good, 16, 3e6) is None
    late = replace(good, serving=good.serving.model_copy(update={"warmup_s": 4.0}))  # the run is 4 cluster s
    with pytest.raises(TestbedError, match="warmup 4 s is not shorter than the duration 4 s") as info:
        live.check_live(late, 16, 3e6)
    assert info.value.key == "warmup_s"
    small = replace(good, serving=good.serving.model_copy(update={"gpu": "h100"}))  # GLM-5 does not fit 8 x 80 GB
    with pytest.raises(TestbedError, match="glm-5 on h100") as info:
        live.check_live(small, 16, 3e6)
    assert info.value.key == "gpu"
