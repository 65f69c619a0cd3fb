"""bulk.py's pure parts: TCP_INFO fields the failover benchmark classifies a stalled flow by, probe windows."""

import struct

from traffic.runtime.bulk import TCP_INFO_LEN, parse_tcp_info, probe_windows


def test_parse_tcp_info_reads_the_back_off_state_and_the_retransmitted_bytes():
    raw = bytearray(TCP_INFO_LEN)
    raw[1], raw[4] = 4, 2  # ca_state Loss, RTO doubled twice
    struct.pack_into("I", raw, 8, 800_000)
    struct.pack_into("I", raw, 100, 5)
    struct.pack_into("Q", raw, 120, 123456)
    struct.pack_into("Q", raw, 208, 7240)
    assert parse_tcp_info(bytes(raw)) == {"total_retrans": 5, "bytes_acked": 123456, "bytes_retrans": 7240,
                                          "ca_state": 4, "backoff": 2, "rto_us": 800_000}
    assert parse_tcp_info(bytes(raw[:100])) == {}


def test_probe_windows_parse_or_mean_always():
    assert probe_windows("10.0.0.1>10.0.1.2:5400") == ("10.0.0.1>10.0.1.2:5400", [])
    assert probe_windows("10.0.0.1>10.0.1.2:5400@3-6.5,9-12") == ("10.0.0.1>10.0.1.2:5400", [(3.0, 6.5), (9.0, 12.0)])
