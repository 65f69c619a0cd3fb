"""fabrics.datapath's plan, directly: the shaper a queue gets and the namespaces the plan names."""

from fabrics import build_fabric
from fabrics.datapath import DatapathConfig, netns_of, plan_datapath, shaper_lines


def test_a_queue_is_a_tbf_at_the_link_rate_over_a_bfifo_of_its_buffer():
    cfg = DatapathConfig(rate_bps=3e6, burst_bytes=18000, buffer_bytes=60000)
    assert shaper_lines("sw1-eth9", cfg) == [
        "qdisc replace dev sw1-eth9 root handle 1: tbf rate 3000kbit burst 18000 limit 60000",
        "qdisc replace dev sw1-eth9 parent 1:1 handle 10: bfifo limit 60000"]
    assert shaper_lines("gpu1-p1", cfg, buffer_bytes=4500)[1].endswith("bfifo limit 4500")


def test_the_plan_names_one_namespace_per_gpu():
    plan = plan_datapath(build_fabric("zcube", gpus=16, gpus_per_switch=4))
    assert plan.netns_names == [netns_of(g) for g in range(1, 17)]
