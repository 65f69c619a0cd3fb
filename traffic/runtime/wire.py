"""The agents' wire format: a frame is ``HEADER`` (magic, transfer id u64, payload length u64, crc32 u32)
then the payload, a transfer's deterministic pattern; the receiver answers each whole frame with ``ACK``
(magic, id, bytes received, crc ok). Standard library only (the agents import it)."""

from __future__ import annotations

import functools
import random
import struct
import zlib
from dataclasses import dataclass

MAGIC = b"KVT1"
ACK_MAGIC = b"KVA1"
HEADER = struct.Struct("!4sQQI")   # magic, transfer id, payload length, crc32 of payload
ACK = struct.Struct("!4sQQB")      # magic, transfer id, bytes received, crc ok (0/1)
MAX_U64 = 2**64 - 1
PATTERN_BYTES = 65_536
PATTERN_WINDOWS = 256
# One random base shared by all transfers; a transfer's pattern is a 64 KiB window
# into it at one of 256 offsets picked by its id, so payloads vary with the id and
# cost no allocation (memoryview slices only), and the crc of a (window, size)
# pair is computed once: schedules cut into equal 64 KiB slices hit that cache.
_BASE = random.Random(0x4B56).randbytes(2 * PATTERN_BYTES)
_BASE_VIEW = memoryview(_BASE)
_STEP = PATTERN_BYTES // PATTERN_WINDOWS


class FrameError(Exception):
    """A byte stream that is not a sequence of frames (bad magic)."""


def _window(transfer_id: int) -> int:
    return (transfer_id * 2_654_435_761 >> 8) % PATTERN_WINDOWS  # Knuth's multiplicative hash


def _pieces(window: int, nbytes: int) -> list[memoryview]:
    block = _BASE_VIEW[window * _STEP:window * _STEP + PATTERN_BYTES]
    full, rest = divmod(nbytes, PATTERN_BYTES)
    return [block] * full + ([block[:rest]] if rest else [])


def pattern(transfer_id: int) -> memoryview:
    """The 64 KiB block a transfer's payload repeats (a window into the shared base)."""
    return _pieces(_window(transfer_id), PATTERN_BYTES)[0]


def payload_pieces(transfer_id: int, nbytes: int) -> list[memoryview]:
    """The payload as zero-copy slices: the pattern repeated, the last one truncated."""
    return _pieces(_window(transfer_id), nbytes)


@functools.lru_cache(maxsize=4096)
def _crc(window: int, nbytes: int) -> int:
    crc = 0
    for piece in _pieces(window, nbytes):
        crc = zlib.crc32(piece, crc)
    return crc


def payload_crc(transfer_id: int, nbytes: int) -> int:
    """crc32 of the payload, computed incrementally over the repeated pattern (cached)."""
    return _crc(_window(transfer_id), nbytes)


def frame_header(transfer_id: int, nbytes: int, crc: int | None = None) -> bytes:
    """The header of one frame; ``crc`` defaults to the payload's true crc32."""
    return HEADER.pack(MAGIC, transfer_id, nbytes, payload_crc(transfer_id, nbytes) if crc is None else crc)


@dataclass(slots=True)
class Received:
    """One frame as the receiver saw it (possibly cut short)."""

    id: int | None
    length: int | None
    received: int
    crc_ok: bool
    first_byte: float
    last_byte: float
    error: str | None = None

    @property
    def verified(self) -> bool:
        """Every announced byte arrived and the crc matches."""
        return self.error is None and self.received == self.length and self.crc_ok


class FrameDecoder:
    """Incremental frame parser: feed it whatever recv() returned, get finished frames back.

    Pure (no sockets), so the receiver's checks can be tested byte by byte.
    """

    def __init__(self) -> None:
        self._head = bytearray()
        self._id = 0
        self._length = 0
        self._expect_crc = 0
        self._received = 0
        self._crc = 0
        self._first = 0.0
        self._in_payload = False

    def feed(self, data: memoryview | bytes, now: float) -> list[Received]:
        """Consume ``data`` (arrived at ``now``); return the frames it completed."""
        view = memoryview(data)
        done: list[Received] = []
        while view:
            if not self._in_payload:
                if not self._head:
                    self._first = now
                take = HEADER.size - len(self._head)
                self._head += view[:take]
                view = view[take:]
                if len(self._head) < HEADER.size:
                    break
                magic, self._id, self._length, self._expect_crc = HEADER.unpack(self._head)
                self._head.clear()
                if magic != MAGIC:
                    raise FrameError(f"bad frame magic {magic!r}; expected {MAGIC!r}")
                self._received = self._crc = 0
                self._in_payload = True
            take = min(len(view), self._length - self._received)
            if take:
                self._crc = zlib.crc32(view[:take], self._crc)
                self._received += take
                view = view[take:]
            if self._received == self._length:
                self._in_payload = False
                done.append(Received(self._id, self._length, self._received,
                                     self._crc == self._expect_crc, self._first, now))
        return done

    def close(self, now: float, why: str) -> Received | None:
        """The frame cut short by the end of the stream, if one was under way."""
        if self._in_payload:
            self._in_payload = False
            return Received(self._id, self._length, self._received, False, self._first, now,
                            f"{why} after {self._received} of {self._length} payload bytes")
        if self._head:
            got = len(self._head)
            self._head.clear()
            return Received(None, None, 0, False, self._first, now,
                            f"{why} after {got} of {HEADER.size} header bytes")
        return None
