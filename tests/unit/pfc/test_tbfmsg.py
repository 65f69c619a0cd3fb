"""The pre-built netlink and PFC frames the helper sends (no root: bytes only)."""

import struct

from pfc import tbfmsg


def _options(msg: bytes) -> dict[int, bytes]:
    """TCA_OPTIONS' nested attributes of an RTM_NEWQDISC message."""
    top = dict((k, msg[s:e]) for k, s, e in tbfmsg._attrs(msg, 16 + 20, len(msg)))
    nested = top[tbfmsg.TCA_OPTIONS]
    return {k: nested[s:e] for k, s, e in tbfmsg._attrs(nested, 0, len(nested))}


def test_tbf_change_is_a_change_of_the_root_tbf_with_rate_burst_and_limit():
    msg = tbfmsg.tbf_change(7, 3e6, 18_000, 60_000)
    length, kind, flags = struct.unpack_from("IHH", msg)
    assert (length, kind, flags) == (len(msg), tbfmsg.RTM_NEWQDISC, tbfmsg.NLM_F_REQUEST)  # no CREATE: a change
    _, ifindex, handle, parent, _ = struct.unpack_from("BxxxiIII", msg, 16)
    assert (ifindex, handle, parent) == (7, 0x10000, tbfmsg.TC_H_ROOT)
    opts = _options(msg)
    rate_bytes = struct.unpack_from("I", opts[tbfmsg.TCA_TBF_PARMS], 8)[0]
    limit = struct.unpack_from("I", opts[tbfmsg.TCA_TBF_PARMS], 24)[0]
    assert (rate_bytes, limit) == (375_000, 60_000)
    assert struct.unpack("I", opts[tbfmsg.TCA_TBF_BURST]) == (18_000,)


def test_pause_rate_is_one_byte_a_second():
    """A frame one byte short of a paused bucket must wait a second, not 8 ms."""
    opts = _options(tbfmsg.tbf_change(3, tbfmsg.PAUSE_RATE_BPS, 3014, 60_000))
    assert struct.unpack_from("I", opts[tbfmsg.TCA_TBF_PARMS], 8)[0] == 1


def test_pfc_frame_is_a_minimum_size_802_1qbb_frame_for_priority_0():
    xoff = tbfmsg.pfc_frame(b"\x02\xff\x00\x00\x00\x02", 0xFFFF)
    xon = tbfmsg.pfc_frame(b"\x02\xff\x00\x00\x00\x02", 0)
    assert len(xoff) == len(xon) == 60
    assert xoff[:6] == bytes.fromhex("0180c2000001") and xoff[12:14] == b"\x88\x08"
    opcode, enable, quanta0 = struct.unpack_from("!HHH", xoff, 14)
    assert (opcode, enable, quanta0) == (0x0101, 0x0001, 0xFFFF)
    assert struct.unpack_from("!H", xon, 18) == (0,)
