"""PFC on a real fabric, through `testbed bench pfc --json`: on both fabrics an
incast with PFC on is lossless and pauses hop by hop, the same incast with
PFC off drops; resume really resumes (the senders still fill the victim's
link); pause and resume latencies are measured; nothing is left behind.

Incast (bench pfc's choice): six GPUs, round robin over the switches their
port 1 sits on, send TCP (iperf3) into GPU 1's port 2, so the last-hop queue
towards it is the congestion point.
"""

from __future__ import annotations

import json

import pytest

from tests.support.integration import leftovers, run_testbed

pytestmark = pytest.mark.integration
RATE = 3e6


def _bench(kind: str, logs) -> dict:
    out = run_testbed("bench", "pfc", kind, "--gpus", "16", "--senders", "6", "--duration", "6", "--json",
                      "--logs", str(logs), check=True).stdout
    return json.loads(out)


@pytest.mark.parametrize("kind,upstream", [("zcube", {"sw1", "sw3"}), ("roft", {"spine1", "spine2"})])
def test_incast_lossless_with_pfc_and_lossy_without(kind, upstream, tmp_path):
    doc = _bench(kind, tmp_path)
    on, off = doc["incast"]["pfc_on"], doc["incast"]["pfc_off"]
    assert on["drops"] == 0 and doc["lossless"], f"PFC on, yet fabric queues dropped {on['drops']} packets"
    assert on["pauses"] > 0 and on["resumes"] == on["pauses"], on
    assert on["netlink_errors"] == 0 and on["resume_stalls"] == 0, on
    assert on["helper"]["doorbell_rings"] > 0, f"the kernel's doorbell never woke the helper: {on['helper']}"
    paused = set(on["paused_nodes"])
    assert paused & upstream, f"the switches feeding the hot queue were never paused: {sorted(paused)}"
    assert any(n.startswith("gpu") for n in paused), f"the pause did not spread to the senders' NICs: {paused}"
    # resume really resumes: together the senders fill GPU 1's link (payload ~0.96 of the rate)
    assert on["goodput_bps"] > 0.8 * RATE, f"incast goodput {on['goodput_bps'] / 1e6:.2f} Mbit/s: no resume?"
    lat = doc["pause_latency_ms"], doc["resume_latency_ms"]
    assert all(d["n"] > 0 and d["p50"] is not None and d["p50"] <= d["p99"] <= d["max"] for d in lat), lat
    assert off["drops"] > 0 and off["pauses"] == 0, "PFC off: the same incast should overflow the last-hop queue"
    assert off["retransmits"] > on["retransmits"], (on, off)
    assert (tmp_path / "bench.json").is_file() and (tmp_path / "incast" / "pfc_ports.csv").is_file()
    assert (tmp_path / "incast" / "pfc.txt").read_text().strip(), "the pause log is empty"
    assert leftovers() == []


def test_dynamic_thresholds_follow_the_switchs_free_buffer(tmp_path):
    """With --pfc-alpha the kernel computes each XOFF from its switch's free
    shared buffer: the thresholds seen at the crossings stay between the
    2-frame floor and the lone-queue ceiling, rise above the static default
    (half a port's buffer) on this lightly loaded fabric, and the incast stays
    lossless."""
    out = run_testbed("bench", "pfc", "zcube", "--gpus", "16", "--senders", "6", "--duration", "6", "--json",
                      "--pfc-alpha", "1/8", "--logs", str(tmp_path), check=True).stdout
    doc = json.loads(out)
    on = doc["incast"]["pfc_on"]
    assert doc["thresholds"] == "dynamic, alpha 0.125"
    assert on["drops"] == 0 and on["pauses"] > 0, on
    queues = json.loads((tmp_path / "incast" / "pfc_policy.json").read_text())["queues"]
    dyn = [q["dynamic"] for q in queues.values() if q.get("dynamic")]
    assert dyn and all(d["alpha"] == 0.125 for d in dyn)
    x = on["xoff_threshold_bytes"]
    assert x["n"] > 0 and 2 * 3014 <= x["min"] <= x["max"] <= max(d["xoff_max"] for d in dyn), x
    assert x["max"] > 30000, f"dynamic XOFF never rose above the static default: {x}"
    assert leftovers() == []


def test_an_8_to_1_incast_from_one_switch_pauses_and_never_drops(tmp_path):
    """Eight NICs on one ZCube switch send into one port (`bench pfc --one-switch`, layersplit's case: a prefill
    server's eight ranks into one decode port; on ROFT a server's ranks sit on eight leaves, one a rail): with
    PFC on nothing drops and the NICs were paused. The twin's side of the same incast is
    tests/unit/backends/ns3/test_pfc.py."""
    out = run_testbed("bench", "pfc", "zcube", "--gpus", "32", "--senders", "8", "--one-switch", "--duration", "6",
                      "--json", "--logs", str(tmp_path), check=True, timeout=900).stdout  # n=32: two bring-ups
    doc = json.loads(out)
    on = doc["incast"]["pfc_on"]
    assert doc["incast"]["one_switch"] and len(doc["incast"]["senders"]) == 8, doc["incast"]
    assert on["drops"] == 0 and doc["lossless"], f"PFC on, yet fabric queues dropped {on['drops']} packets"
    assert on["pauses"] > 0 and on["resumes"] == on["pauses"], on
    assert any(n.startswith("gpu") for n in on["paused_nodes"]), f"no sender's NIC was paused: {on['paused_nodes']}"
    assert leftovers() == []
