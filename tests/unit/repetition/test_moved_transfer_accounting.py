"""A transfer the agent moved to the other NIC port pair is counted where its bytes went: the NIC port and
the links of the pair it was sent over, not the planned ones."""

from __future__ import annotations

from fabrics import build_fabric
from testbed.repetition import invariants as inv
from testbed.repetition import link_traffic as lt
from traffic.runtime.records import sent_pair

PLANNED = {"id": 1, "src": "gpu1", "dst": "gpu9", "src_ip": "10.1.0.1", "dst_ip": "10.2.0.9", "bytes": 5000,
           "received_bytes": 5000, "verified": True}
MOVED = PLANNED | {"retried": True, "moved": True, "first_error": "TimeoutError: [Errno 110] Connection timed out",
                   "sent_src_ip": "10.2.0.1", "sent_dst_ip": "10.1.0.9"}


def test_sent_pair_is_the_pair_used_or_the_planned_one():
    assert sent_pair(MOVED) == ("10.2.0.1", "10.1.0.9")
    assert sent_pair(PLANNED) == ("10.1.0.1", "10.2.0.9")


def test_the_nic_check_counts_a_moved_transfer_on_the_nic_it_left_from():
    first = {"gpu1:p1": {"bytes": 0}, "gpu1:p2": {"bytes": 0}}
    last = {"gpu1:p1": {"bytes": 300}, "gpu1:p2": {"bytes": 6000}}  # the planned port carried only the first try
    assert inv.nic_sent_covers_payload(first, last, [MOVED]) == []
    assert inv.nic_sent_covers_payload(first, last, [PLANNED]) != []  # the same bytes on the planned NIC: short


def test_link_traffic_routes_a_moved_transfer_over_the_pair_it_took():
    loads = lt.link_traffic(build_fabric("zcube", 16, 8), [MOVED])
    carrying = {q: x.kv_bytes for q, x in loads.items() if x.bytes}
    assert carrying == {"gpu1:p2": 5000, "sw2:9": 5000, "sw1:5": 5000}  # test_link_traffic's other port pair


def test_transfers_csv_gains_the_retry_columns_only_when_a_sender_retried_or_moved(tmp_path):
    import csv

    from traffic.runtime.records import COLUMNS, RETRY_KEYS, write_transfers_csv

    plain = {c: 1 for c in COLUMNS}
    write_transfers_csv([plain], tmp_path / "a.csv")
    assert tuple(next(csv.reader(open(tmp_path / "a.csv")))) == COLUMNS
    moved = plain | {"retried": True, "moved": True, "first_error": "TimeoutError", "sent_src_ip": "10.2.0.1",
                     "sent_dst_ip": "10.1.0.2"}
    write_transfers_csv([plain, moved], tmp_path / "b.csv")
    rows = list(csv.DictReader(open(tmp_path / "b.csv")))
    assert tuple(rows[0]) == COLUMNS + RETRY_KEYS
    assert (rows[0]["moved"], rows[1]["moved"], rows[1]["sent_src_ip"]) == ("", "True", "10.2.0.1")
