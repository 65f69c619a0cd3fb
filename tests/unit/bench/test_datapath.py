"""bench datapath's pure pieces: flags refused in one line, iperf3's UDP result, packets per core, the table."""

from __future__ import annotations

import json

import pytest

from common.errors import EnvironmentProblem, TestbedError
from testbed.bench import datapath as dp
from testbed.cli.bench import datapath as cli_datapath


def test_flags_are_checked_in_one_line():
    dp.check(64, 5)
    with pytest.raises(TestbedError, match="--size"):
        dp.check(10, 5)
    with pytest.raises(TestbedError, match="--seconds"):
        dp.check(64, 0.5)


def test_iperf3_udp_result_and_the_figures():
    text = json.dumps({"end": {"sum": {"packets": 100_000, "lost_packets": 40_000, "seconds": 5.0}}})
    assert dp._udp_result(text) == (100_000, 40_000, 5.0)
    with pytest.raises(EnvironmentProblem, match="no UDP result"):
        dp._udp_result("iperf3: error - unable to connect")
    f = dp.figures(100_000, 40_000, 5.0, {"iperf3": 0.5, "ovs pmd": 1.0, "softirq": 0.1, "other": 3.0})
    assert f["received_pps"] == 12_000 and f["hop_cores"] == 1.6 and f["pps_per_core"] == 7500
    assert not f["sender_limited"] and dp.figures(1000, 0, 1.0, {"iperf3": 1.0})["sender_limited"]


def test_the_table_names_both_hops_and_their_ratio():
    hop = dp.figures(100_000, 0, 5.0, {"iperf3": 1.0, "softirq": 0.2})
    doc = {"size_bytes": 64, "seconds": 5, "load": "load average 0.1", "emulated": dict(hop, path="a"),
           "kernel": dict(hop, path="b"), "ratio": 1.0}
    text = "\n".join(dp.table(doc))
    assert "emulated" in text and "kernel" in text and "sender-limited" in text and "1.0" in text


def test_the_verb_refuses_a_bad_size_before_root(capsys):
    import argparse

    from testbed.cli import main

    assert main(["bench", "datapath", "--size", "5"]) == 2
    assert "--size" in capsys.readouterr().err
    p = argparse.ArgumentParser()
    cli_datapath.register(p.add_subparsers())
    assert p.parse_args(["datapath", "--seconds", "2"]).seconds == 2.0
