"""testbed.report.ep_tail: who sends a repetition's slowest EP messages and what held their NICs; a hand-made
repetition whose answer is known by construction."""

import csv

from testbed.report import ep_tail


def write_rep(path, slow_sender: str):
    """200 EP messages of 1 ms from gpu2..gpu9 (ranks 1..7, 0 for gpu9) and 2 of 50 ms from ``slow_sender``;
    pfc.txt pauses gpu1 twice from sw1's queue and gpu9 once from sw17's (both rank 0), gpu2 once (rank 1)."""
    rows = [{"src": f"gpu{2 + i % 8}", "kind": "dispatch" if i % 2 else "combine", "start": 1.0, "end": 1.001}
            for i in range(200)]
    rows += [{"src": slow_sender, "kind": "combine", "start": 2.0, "end": 2.05} for _ in range(2)]
    rows += [{"src": "gpu1", "kind": "kv", "start": 0.0, "end": 9.0}]  # not EP: left out
    with open(path / "messages.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["src", "kind", "start", "end"])
        w.writeheader()
        w.writerows(rows)
    (path / "pfc.txt").write_text("1 gpu1 nic 1 1 sw1:3\n2 gpu1 nic 1 0 sw1:3\n3 gpu1 nic 2 1 sw1:3\n"
                                  "4 gpu9 nic 1 1 sw17:5\n5 gpu2 nic 1 1 sw3:1\n")


def test_the_slowest_one_percent_and_the_pausing_queues(tmp_path):
    write_rep(tmp_path, "gpu17")  # rank 0 of server 3
    t = ep_tail.figures(tmp_path, 8)
    assert t["messages"] == 202 and t["fct_ms"]["p50"] == 1.0 and t["fct_ms"]["p99"] == 1.0  # 2 of 202 above
    assert t["slowest_from_rank0"] == 1.0  # the two 50 ms messages are the slowest 1 %, both from rank 0
    assert t["all_from_rank0"] == round((200 // 8 + 2) / 202, 3)  # gpu9 every 8th message, and the two
    assert t["rank0_held_by"] == [("sw1:3", 2), ("sw17:5", 1)]
    text = ep_tail.sentence({"zcube": t})
    assert text.startswith("ZCube: EP message FCT P50 1.00 ms") and "rank 0: 100% (of all: 13%)" in text
    assert "rank-0 NICs paused by sw1:3 x2, sw17:5 x1" in text


def test_another_sender_and_no_messages(tmp_path):
    write_rep(tmp_path, "gpu3")
    assert ep_tail.figures(tmp_path, 8)["slowest_from_rank0"] == 0.0
    assert ep_tail.figures(tmp_path / "missing", 8) is None
