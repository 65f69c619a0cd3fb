"""PFC on a real fabric: incast with PFC on is lossless and pauses hop by hop;
the same incast with PFC off drops. Resume really resumes (the senders get
their bytes through), and down leaves nothing behind (helper, pinned maps).

Incast: six GPUs on different odd switches send TCP (iperf3) into GPU 1's
port 2, so the last-hop queue (GPU 1's single-rail switch towards it) is the
congestion point and the odd->even cables feeding it are paused.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from integration_helpers import leftovers, run_testbed

pytestmark = pytest.mark.integration
SENDERS = [2, 3, 4, 6, 7, 8]  # ZCube n=16,k=8: port 1 of these sits on odd switches sw1/sw3
SECONDS = 6


def _incast() -> list[float]:
    for i, _ in enumerate(SENDERS):
        subprocess.run(["ip", "netns", "exec", "tb-gpu1", "iperf3", "-s", "-1", "-D", "-p", str(5300 + i)], check=True)
    time.sleep(0.5)
    clients = [subprocess.Popen(["ip", "netns", "exec", f"tb-gpu{g}", "iperf3", "-c", "10.2.0.1", "-p", str(5300 + i),
                                 "-t", str(SECONDS), "-J"], stdout=subprocess.PIPE, text=True)
               for i, g in enumerate(SENDERS)]
    rates = []
    for c in clients:
        out, _ = c.communicate(timeout=SECONDS + 30)
        rates.append(json.loads(out)["end"]["sum_received"]["bits_per_second"])
    return rates


def _queues() -> list[dict]:
    return json.loads(run_testbed("status", "--json", check=True).stdout)["queues"]


def _fabric(pfc: str):
    run_testbed("up", "zcube", "--gpus", "16", "--pfc", pfc, check=True)
    return json.loads(Path("/run/zcube-testbed/state.json").read_text())


def test_incast_lossless_with_pfc_and_lossy_without():
    st = _fabric("on")
    try:
        before = sum(q.get("drops", 0) for q in _queues())
        rates = _incast()
        time.sleep(1.5)  # the helper writes its status and log once a second
        drops = sum(q.get("drops", 0) for q in _queues()) - before
        sdir = Path(st["state_dir"])
        pfc = json.loads((sdir / "pfc_status.json").read_text())
        log = (sdir / "pfc.txt").read_text().split("\n")
        policy = json.loads((sdir / "pfc_policy.json").read_text())
    finally:
        run_testbed("down", check=True)
    assert drops == 0, f"PFC on, yet fabric queues dropped {drops} packets"
    assert pfc["pauses"] > 0 and pfc["resumes"] == pfc["pauses"], pfc
    paused = {line.split()[1] for line in log if line.strip() and line.split()[4] == "1"}
    assert paused & {"sw1", "sw3"}, f"the odd switches feeding the hot queue were never paused: {paused}"
    assert any(n.startswith("gpu") for n in paused), f"the pause did not spread to the senders' NICs: {paused}"
    hot = [q for q, e in policy["queues"].items() if e.get("xoff") and set(e["feeders"]) >= {"sw1:9", "sw3:9"}]
    assert hot, "policy: no queue is fed by both odd switches' cables"
    # resume really resumes: together the senders fill GPU 1's link (payload ~0.96 of 3 Mbit/s)
    assert sum(rates) > 0.8 * 3e6, f"incast goodput {sum(rates) / 1e6:.2f} Mbit/s: paused senders did not resume"
    assert leftovers() == []

    _fabric("off")
    try:
        before = sum(q.get("drops", 0) for q in _queues())
        _incast()
        drops = sum(q.get("drops", 0) for q in _queues()) - before
        assert not Path("/run/zcube-testbed/pfc_status.json").exists()
    finally:
        run_testbed("down", check=True)
    assert drops > 0, "PFC off: the same incast should overflow the last-hop queue"
    assert leftovers() == []
