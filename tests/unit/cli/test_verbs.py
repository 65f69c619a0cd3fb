"""The verbs' own modules, called directly: testbed.cli.plan (plan, path, cost), testbed.cli.report, testbed.cli.fabric
(what up, down, status and clean print and pass on) and ``python -m testbed`` (testbed.__main__)."""

from __future__ import annotations

import json
import subprocess
import sys
from argparse import Namespace

from common.paths import REPO
from testbed.cli import compare as compare_verbs
from testbed.cli import fabric as fabric_verbs
from testbed.cli import plan as plan_verbs
from testbed.cli import report as report_verbs
from testbed.emulation import fabricctl
from testbed.emulation.state import FabricState
from testbed.report import comparison


def test_cost_table_counts_by_hand(capsys):
    """n=32, k=8: ZCube has 2n/k = 8 switches of radix k + (n/k)c = 8 + 4*2 = 16 (c = k^2/n = 2): 128 ports,
    64 NIC cables + 4 x 4 odd-even pairs x 2 = 96 cables, 2 optics each = 192, 64 of them switch-to-switch.
    ROFT (radix 16): 8 leaves + 4 spines = 12 switches, 192 ports, 64 + 8 x 4 x 2 = 128 cables, 256 optics,
    128 switch-to-switch. Ratios 8/12 = 0.67, 96/128 = 0.75, 64/128 = 0.50."""
    assert plan_verbs.cmd_cost(Namespace(json=False)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["scale", "fabric", "switches", "ports", "cables", "optics", "sw-sw", "optics", "capex"]
    assert lines[1].split()[:8] == ["n=32", "(emulated)", "zcube", "8", "128", "96", "192", "64"]
    assert lines[2].split()[:6] == ["roft", "12", "192", "128", "256", "128"]
    assert lines[3].split()[:6] == ["ratio", "0.67", "0.67", "0.75", "0.75", "0.50"]
    assert len(lines) == 1 + 3 * 4  # four scales, three lines each


def test_path_text_by_hand(capsys):
    """ZCube n=16: gpu1's port 1 is on sw1, gpu9's port 2 on sw4; gpu1's port 2 on sw2, gpu9's port 1 on sw1."""
    args = Namespace(fabric="zcube", gpus=16, gpus_per_switch=8, cables=None, gpus_per_server=None, radix=None,
                     src=1, dst=9, policy="striped", json=False)
    assert plan_verbs.cmd_path(args) == 0
    assert capsys.readouterr().out.splitlines() == [
        "ZCube(gpus=16, gpus_per_switch=8, cables=4): gpu1 -> gpu9, policy striped",
        "  gpu1:p1 -> sw1 -> sw4 -> gpu9:p2", "  gpu1:p2 -> sw2 -> sw1 -> gpu9:p1"]


def test_report_and_compare_print_what_they_wrote(tmp_path, monkeypatch, capsys):
    import testbed.report as report

    monkeypatch.setattr(report, "build_report", lambda run: run / "report.html")
    monkeypatch.setattr(report, "compare_runs", lambda runs: {"runs": [str(r) for r in runs]})
    monkeypatch.setattr(report, "compare_html_runs", lambda runs, out: out)
    monkeypatch.setattr(comparison, "lines", lambda doc: [" vs ".join(doc["runs"])])
    assert report_verbs.cmd_report(Namespace(run_dir=str(tmp_path))) == 0
    assert capsys.readouterr().out == (f"wrote {tmp_path / 'summary.json'}, {tmp_path / 'headline.csv'}, "
                                       f"{tmp_path / 'figures'}/\n{tmp_path / 'report.html'}\n")
    assert compare_verbs.cmd_compare(Namespace(run_dirs=["a", "b"], json=False, html=str(tmp_path / "c.html"))) == 0
    assert capsys.readouterr().out == f"a vs b\n{tmp_path / 'c.html'}\n"
    assert compare_verbs.cmd_compare(Namespace(run_dirs=["a", "b"], json=True, html=None)) == 0
    assert json.loads(capsys.readouterr().out) == {"runs": ["a", "b"]}


def test_up_lets_its_fabric_outlive_it_and_says_what_is_up(monkeypatch, capsys):
    """'up' is the one caller that releases the lifeline: its fabric is meant to stay up after it exits."""
    seen = {}

    def up(fabric_args, config, miswire, log, pfc, failover, release):
        seen.update(fabric_args=fabric_args, release=release, failover=failover)
        return FabricState(timings={"up_s": 4.25}, queues=[{}] * 3, config={"rate_bps": 3e6}, controller_pid=77,
                           warnings=["small buffer"])

    monkeypatch.setattr(fabricctl, "up", up)
    args = Namespace(fabric="zcube", gpus=16, gpus_per_switch=8, cables=None, gpus_per_server=None, radix=None,
                     miswire=None, failover="fast", rate=None, buffer=None, mtu=None, pfc=None, pfc_xoff=None,
                     pfc_xon=None, pfc_alpha=None, pfc_headroom=None, pfc_poll_us=None)
    from types import SimpleNamespace

    monkeypatch.setattr(fabric_verbs, "fabric_spec", lambda a: SimpleNamespace(args={"gpus": 16, "kind": "zcube"},
                                                                                datapath=None, pfc=None))
    assert fabric_verbs.cmd_up(args) == 0
    assert seen == {"fabric_args": {"gpus": 16, "kind": "zcube"}, "release": True, "failover": "fast"}
    out = capsys.readouterr()
    assert out.out == "zcube with 16 GPUs is up in 4.2 s (3 queues at 3 Mbit/s, controller pid 77)\n"
    assert out.err == "WARNING: small buffer\n"


def test_clean_lists_at_most_twelve_items(monkeypatch, capsys, tmp_path):
    import testbed.experiment.rundir as rundir
    from testbed.emulation import clean

    monkeypatch.setattr(clean, "clean", lambda: [f"netns tb-gpu{i}" for i in range(1, 15)])
    monkeypatch.setattr(rundir, "mark_killed_runs", lambda root: [])
    assert fabric_verbs.cmd_clean(Namespace()) == 0
    out = capsys.readouterr().out
    assert out == "removed 14 items: " + ", ".join(f"netns tb-gpu{i}" for i in range(1, 13)) + " ...\n"


def test_python_m_testbed_runs_the_cli():
    ok = subprocess.run([sys.executable, "-m", "testbed", "path", "zcube", "--gpus", "16", "--gpus-per-switch", "8",
                         "--src", "1", "--dst", "9"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.splitlines()[1] == "  gpu1:p1 -> sw1 -> sw4 -> gpu9:p2"
    bad = subprocess.run([sys.executable, "-m", "testbed", "nosuchverb"], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "nosuchverb" in bad.stderr
