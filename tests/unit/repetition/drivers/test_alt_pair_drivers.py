"""Every driver that writes plan lines or orders names the other NIC port pair (alt_src_ip, alt_dst_ip), so an
agent whose planned pair dies can resend there; the agent accepts what they write."""

from __future__ import annotations

import io
import json

from common import scale
from fabrics import addressing, build_fabric
from fabrics.describe import path_json
from testbed.bench import exchange as ex
from testbed.repetition.drivers.plan import prepare_plan
from tests.support.settings import repetition
from tests.unit.traffic.runtime.test_coordinator import config
from traffic.model.serving import Message
from traffic.runtime import coordinator, orders


def _is_other_pair(row: dict) -> bool:
    """The alternative leaves the same GPU from its other port towards the same GPU's other port."""
    (sg, sp), (dg, dp) = addressing.parse_ip(row["src_ip"]), addressing.parse_ip(row["dst_ip"])
    return (addressing.parse_ip(row["alt_src_ip"]), addressing.parse_ip(row["alt_dst_ip"])) == ((sg, 3 - sp),
                                                                                              (dg, 3 - dp))


def test_alt_ips_is_the_other_port_of_both_ends():
    assert addressing.alt_ips(3, 1, 17, 2) == {"alt_src_ip": "10.2.0.3", "alt_dst_ip": "10.1.0.17"}
    assert addressing.alt_ips(300, 2, 5, 1) == {"alt_src_ip": "10.1.1.44", "alt_dst_ip": "10.2.0.5"}


def test_replay_plan_lines_name_the_other_pair_and_the_agent_reads_them():
    p = prepare_plan(repetition({"trace": {"duration_s": 15}}), 16, scale.DEFAULT_RATE_BPS, scale.DEFAULT_MTU)
    assert p.plan_rows and all(_is_other_pair(r) for r in p.plan_rows)
    row = p.plan_rows[0]
    t = orders.parse_plan_line("plan:1", json.dumps(row), row["src"])
    assert (t.alt_src_ip, t.alt_dst_ip) == (row["alt_src_ip"], row["alt_dst_ip"])


def test_path_json_alternative_is_the_other_listed_path():
    doc = path_json(build_fabric("zcube", gpus=32, gpus_per_switch=8), 3, 17)
    pairs = {(p["src_ip"], p["dst_ip"]) for p in doc["paths"]}
    assert len(pairs) == 2 and {(p["alt_src_ip"], p["alt_dst_ip"]) for p in doc["paths"]} == pairs


def test_bench_exchange_rows_name_the_other_pair():
    phases = {("decode0", 30, "dispatch"): [Message(i, "dispatch", 1, 17, 3000, 3e6, None, "decode0", 30)
                                            for i in (1, 2)]}
    rows, _ = ex.plan(phases, list(phases), "striped", 3e6, 3000, build_fabric("zcube", gpus=32, gpus_per_switch=8))
    assert [(r["alt_src_ip"], r["alt_dst_ip"]) for r in rows] == [("10.2.0.1", "10.1.0.17"), ("10.1.0.1", "10.2.0.17")]


def test_coordinator_orders_name_the_other_pair_and_log_it_in_the_plan(tmp_path):
    coord = coordinator.Coordinator(config(tmp_path))
    coord.plans["gpu1"] = log = io.StringIO()
    name, line = coord.send(Message(7, "kv", 1, 2, 1000, 1e6, 0, "prefill0", 1))
    order = json.loads(line)
    sp, dp = (int(order[k].split(".")[2]) for k in ("src_ip", "dst_ip"))  # config: port p of GPU g is 127.0.p.g
    assert name == "gpu1" and (order["src_ip"], order["dst_ip"]) == (f"127.0.{sp}.1", f"127.0.{dp}.2")
    assert (order["alt_src_ip"], order["alt_dst_ip"]) == (f"127.0.{3 - sp}.1", f"127.0.{3 - dp}.2")
    assert json.loads(log.getvalue())["alt_src_ip"] == order["alt_src_ip"]
    t = orders.order_transfer(order, "gpu1")
    assert (t.alt_src_ip, t.alt_dst_ip) == (order["alt_src_ip"], order["alt_dst_ip"])
