"""The benchmarks' verb modules (testbed.cli.bench.*) and the fabric flags (testbed.cli.options), directly: what
each subcommand parses, checks before a fabric is built, hands its benchmark and prints (the benchmarks
themselves stand in)."""

from __future__ import annotations

import json

import pytest

from common.errors import TestbedError
from testbed.cli import build_parser, options
from testbed.cli.bench import exchange, failover, fidelity, lateness, pfc
from testbed.emulation import fabricctl


@pytest.fixture(autouse=True)
def no_root_needed(monkeypatch):
    monkeypatch.setattr(fabricctl, "require_root", lambda: None)
    monkeypatch.setattr(fabricctl, "require_ovs", lambda: None)


def parse(*argv):
    return build_parser().parse_args(["bench", *argv])


def test_each_subcommand_is_its_modules_command_with_its_defaults():
    assert parse("fidelity", "zcube").func is fidelity.cmd
    f = parse("fidelity", "roft", "--gpus", "16")
    assert (f.fabric, f.gpus, f.duration, f.omit, f.ecmp, f.sweep) == ("roft", 16, 16, 3, "spread", None)
    p = parse("pfc")
    assert (p.func, p.fabric, p.pfc, p.duration, p.senders) == (pfc.cmd, "zcube", "on", 16, 8)
    assert parse("failover", "roft").mode == "both" and parse("failover").func is failover.cmd
    assert parse("exchange").func is exchange.cmd and parse("lateness", "roft").func is lateness.cmd
    with pytest.raises(SystemExit):
        parse("fidelity")  # fidelity names its fabric


def test_fabric_flags_become_the_models_arguments_and_the_link_config():
    args = parse("fidelity", "zcube", "--gpus", "16", "--gpus-per-switch", "8", "--rate", "4mbit", "--mtu", "1500")
    # cables left out: None, which the builder makes k^2/n = 64/16 = 4
    spec = options.fabric_spec(args)
    assert spec.args == {"kind": "zcube", "gpus": 16, "gpus_per_switch": 8, "cables": None}
    assert (spec.datapath.rate_bps, spec.datapath.mtu) == (4e6, 1500)
    assert options.fabric_from(args, "zcube").describe() == "ZCube(gpus=16, gpus_per_switch=8, cables=4)"
    with pytest.raises(TestbedError, match=r"link.rate \(from --rate\): rate 'fast' is not understood"):
        options.fabric_spec(parse("fidelity", "zcube", "--rate", "fast"))


def test_pfc_flags_become_a_pfc_config():
    cfg = options.fabric_spec(parse("pfc", "--pfc-xoff", "30kb")).pfc
    assert (cfg.enabled, cfg.xoff_bytes, cfg.dynamic_alpha) == (True, 30000, None)
    assert options.fabric_spec(parse("pfc", "--pfc-alpha", "0.5")).pfc.dynamic_alpha == 0.5
    assert options.fabric_spec(parse("failover", "--pfc", "off")).pfc.enabled is False
    assert options.fabric_spec(parse("fidelity", "zcube")).pfc.enabled is False  # fidelity has no PFC flags


def test_a_bad_pfc_setting_on_a_fabric_verb_is_the_experiment_files_error():
    """The same validation as an experiment file: the PFC policy resolves on the links before anything is
    built, and the error names the flag."""
    with pytest.raises(TestbedError, match=r"pfc.xoff_bytes \(from --pfc-xoff\): pfc xoff 90000 B is larger than"):
        options.fabric_spec(parse("pfc", "--pfc-xoff", "90kb"))
    with pytest.raises(TestbedError, match=r"pfc.dynamic_alpha \(from --pfc-alpha\): pfc xoff 30000 B conflicts"):
        options.fabric_spec(parse("pfc", "--pfc-xoff", "30kb", "--pfc-alpha", "0.5"))


def test_print_result_prints_the_table_then_where_or_the_json(capsys):
    options.print_result({"a": 1}, ["line 1", "line 2"], "/reports/x", False)
    assert capsys.readouterr().out == "line 1\nline 2\n/reports/x\n"
    options.print_result({"a": 1}, ["line 1"], "/reports/x", True)
    assert json.loads(capsys.readouterr().out) == {"a": 1}


def test_fidelity_prints_the_summary_of_what_it_measured(monkeypatch, capsys):
    from testbed.bench import fidelity as bench

    seen = {}

    def fake(fargs, cfg, duration, omit, log, patterns, ecmp):
        seen.update(fargs=fargs, patterns=patterns, ecmp=ecmp)
        p = {"flows": 32, "median_ratio": 0.97, "min_ratio": 0.9, "aggregate_goodput_bps": 90e6, "retransmits": 3,
             "drops": 0, "cpu": {"ovs_vswitchd_cores": 0.5, "machine_busy_fraction": 0.6}, "cpu_saturated": False,
             "ideal_known": True}
        return {"flows": [], "summary": {"rate_bps": 3e6, "mtu": 3000, "duration_s": 5, "permutation": p,
                                         "bringup_s": 4.0, "teardown_s": 0.5, "cpu_saturated": False,
                                         "targets_met": True}}

    monkeypatch.setattr(bench, "bench", fake)
    assert fidelity.cmd(parse("fidelity", "zcube", "--gpus", "16", "--pattern", "permutation")) == 0
    assert seen == {"fargs": {"kind": "zcube", "gpus": 16, "gpus_per_switch": 8, "cables": None},
                    "patterns": ("permutation",), "ecmp": "spread"}
    assert capsys.readouterr().out.splitlines() == [
        "zcube n=16 at 3 Mbit/s, MTU 3000, 5 s per pattern",
        "  permutation    32 flows: median 0.970, min 0.900, aggregate   90.0 Mbit/s, 3 retransmits, 0 queue drops; "
        "ovs-vswitchd 0.50 cores, machine 60% busy",
        "bring-up 4.0 s, teardown 0.5 s",
        "permutation targets (median >= 0.95, min >= 0.85, not saturated): met"]


def test_failover_prints_flows_that_delivered_nothing_as_silent_not_lost(monkeypatch, capsys):
    from testbed.bench import failover as bench

    rows = [{"crossing": True, "starved": True, "stalled": "backoff", "bytes_retrans": 100},
            {"crossing": True, "starved": False, "stalled": None, "bytes_retrans": 50}]
    streams = [{"stalled": True, "recovery_ms": 50.0, "blackhole_ms": 5.0, "delay_ms": 40.0, "lost": 0}]
    doc = {"fabric": "roft", "mode": "fast", "cables": ["leaf1:9"], "cycles": 8, **bench.summarise(streams, rows),
           "ovs_port_status_ms": {"p50": 90.0, "p99": 200.0}, "restored_ms": {"p50": 10.0},
           "controller_restart_drops": 0, "flows_reinstalled": 0, "cpu_saturated": False, "per_flow": rows}
    monkeypatch.setattr(bench, "bench", lambda *a, **k: [doc])
    assert failover.cmd(parse("failover", "roft", "--mode", "fast")) == 0
    line = capsys.readouterr().out
    assert "1/2 crossing TCP flows delivered nothing while their cable was down" in line and " lost" not in line
    assert "1 in RTO back-off (transport)" in line
    assert failover.cmd(parse("failover", "roft", "--mode", "fast", "--json")) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["starved_through_cut"], got["probes_lost"]) == (1, 0) and "per_flow" not in got
    assert "lost_transfers" not in got


def test_lateness_checks_its_levels_and_logs_before_anything_is_built(tmp_path):
    with pytest.raises(TestbedError, match="levels"):
        lateness._check(parse("lateness", "--levels", "x", "--logs", str(tmp_path)))
    with pytest.raises(TestbedError, match="--logs .*missing: does not exist"):
        lateness._check(parse("lateness", "--levels", "16", "--logs", str(tmp_path / "missing")))
    assert [o.key for o in lateness.sized(parse("lateness", "--gpus", "16"))] == ["gpus", "gpus_per_switch",
                                                                               "gpus_per_server"]
