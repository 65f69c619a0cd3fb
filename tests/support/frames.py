"""Whole agent frames as bytes (the sender streams its frames and never builds one)."""

from __future__ import annotations

from traffic.runtime.wire import frame_header, payload_pieces


def build_frame(transfer_id: int, nbytes: int, crc: int | None = None) -> bytes:
    return frame_header(transfer_id, nbytes, crc) + b"".join(payload_pieces(transfer_id, nbytes))
