"""Traffic agent: one small process per emulated GPU host that replays its KV transfers.

Run inside a GPU's namespace::

    ip netns exec tb-gpu3 python -m traffic.runtime.agent --name gpu3 \\
        --listen 10.1.0.3:7000 --listen 10.2.0.3:7000 \\
        --plan gpu3.plan.jsonl --out out_dir (--t0 <CLOCK_MONOTONIC s> | --t0-stdin) [--ready-file path]

With ``--t0-stdin`` the agent binds, announces readiness, then reads t0 as
one line on standard input: the orchestrator hands out the common start
time only once every agent is listening, so a slow start costs wall time,
never lateness (``traffic.runtime.launcher`` forks agents this way).

Receiver: every ``--listen`` address accepts TCP connections carrying one or
more frames ``HEADER`` (magic, transfer id u64, payload length u64, crc32 u32)
+ payload. Per frame it writes a line to ``<name>.recv.jsonl`` (id, peer,
bytes, first/last byte times, crc check, verified) and answers with ``ACK``
(magic, id, bytes received, crc ok).

Sender: each plan line is one transfer, sent on its own TCP connection bound
to ``src_ip`` at ``t0 + start`` (one task per transfer, so a slow one never
holds up others); the sender waits for the ack and writes a line to
``<name>.sent.jsonl``. Failures (refused, reset, timeout, stop) are written
with ``ok: false`` and the error, never dropped. Once every planned transfer
has ended, ``<name>.done`` appears; the agent keeps receiving until SIGTERM or
SIGINT, then records what was in flight, flushes and exits 0.

Dead connections: a cut cable makes TCP stall in retransmission, not fail. An
RDMA NIC fails its queue pair once the retry count is exceeded, and a transfer
engine then resubmits on another NIC (Mooncake Transfer Engine, "Fault
Handling"). The sender does the same: every socket gets ``TCP_USER_TIMEOUT`` =
``--dead-after`` (data unacknowledged that long fails the connection with
ETIMEDOUT; so does a window that stays shut that long) and a connect is given
as long. A transfer that fails on a dead connection (that timeout, reset,
aborted, broken pipe, host/network unreachable or down) is sent once more,
whole, on a fresh connection: over the other NIC port pair
(``alt_src_ip`` -> ``alt_dst_ip`` of its plan line) when it has one, else over
the same pair; on a persistent connection every transfer queued or in flight
on it is. A bad ack or crc, ``--transfer-timeout`` (the whole budget,
both attempts) and a stop are not retried. For ``--dead-hold`` seconds after
a dead connection on a pair, new transfers planned on it go straight to its
alternative; then the planned pair is tried again. The sent record says what
happened: ``retried``, ``first_error``, ``moved`` (sent on the other pair) and
``sent_src_ip``/``sent_dst_ip`` (where the last attempt went); a retry that
fails too is ``ok: false`` with "retry failed: <second> (first: <first>)".
The receiver records every frame it saw, a cut one included, but reports only
whole frames to a coordinator: a cut frame's sender retries it or reports it.

All times are ``time.monotonic()`` (CLOCK_MONOTONIC, shared by every network
namespace on the host), absolute, in seconds. Standard library only, so 32-64
of these start fast and stay small. Bad arguments: one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import errno
import functools
import json
import math
import os
import random
import signal
import socket
import struct
import sys
import time
import zlib
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, TextIO

MAGIC = b"KVT1"
ACK_MAGIC = b"KVA1"
HEADER = struct.Struct("!4sQQI")   # magic, transfer id, payload length, crc32 of payload
ACK = struct.Struct("!4sQQB")      # magic, transfer id, bytes received, crc ok (0/1)
MAX_U64 = 2**64 - 1
PATTERN_BYTES = 65_536
RECV_BUFFER_BYTES = 262_144
DEFAULT_TRANSFER_TIMEOUT_S = 60.0
DEFAULT_DEAD_AFTER_S = 1.0
DEFAULT_DEAD_HOLD_S = 2.0
# what a dead path looks like to TCP (or our connect bound): worth one more try, elsewhere if possible
DEAD_ERRNOS = frozenset({errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE, errno.EHOSTUNREACH,
                         errno.ENETUNREACH, errno.ENETDOWN})
IO_MODES = ("sock", "stream")
ALT_KEYS = ("alt_src_ip", "alt_dst_ip")  # optional in plan lines and orders: the other NIC port pair
CONNECTION_MODES = ("persistent", "per-transfer")

PATTERN_WINDOWS = 256
# One random base shared by all transfers; a transfer's pattern is a 64 KiB window
# into it at one of 256 offsets picked by its id, so payloads vary with the id and
# cost no allocation (memoryview slices only), and the crc of a (window, size)
# pair is computed once: schedules cut into equal 64 KiB slices hit that cache.
_BASE = random.Random(0x4B56).randbytes(2 * PATTERN_BYTES)
_BASE_VIEW = memoryview(_BASE)
_STEP = PATTERN_BYTES // PATTERN_WINDOWS


class AgentError(Exception):
    """Bad arguments or plan; printed as one line, exit status 2."""


class FrameError(Exception):
    """A byte stream that is not a sequence of frames (bad magic)."""


# --------------------------------------------------------------------------- payload and frames

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


# --------------------------------------------------------------------------- records

class RecordFile:
    """JSON-lines output, line-buffered so a crash leaves every finished record on disk."""

    def __init__(self, path: str) -> None:
        try:
            self._file: TextIO = open(path, "w", encoding="utf-8", buffering=1)
        except OSError as exc:
            raise AgentError(f"cannot write {path}: {exc.strerror}") from None

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._file.close()


def _touch(path: str, text: str = "") -> None:
    """Write ``path`` atomically so a watcher never reads half of it."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


# --------------------------------------------------------------------------- plan

@dataclass(frozen=True, slots=True)
class PlannedTransfer:
    """One line of the plan: what to send, where from, where to, when (s after t0), and the other NIC
    port pair's addresses (None: it has none) for when its own pair is dead."""

    id: int
    request_id: int | None
    src: str | None
    dst: str | None
    src_ip: str
    dst_ip: str
    dst_port: int
    bytes: int
    start: float
    alt_src_ip: str | None = None
    alt_dst_ip: str | None = None


def _want_int(where: str, obj: dict[str, Any], key: str, lo: int, hi: int) -> int:
    value = obj.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise AgentError(f"{where}: {key} {value!r} is not allowed; expected an integer {lo}..{hi}")
    return value


def _want_ip(where: str, obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    try:
        socket.inet_pton(socket.AF_INET, value)  # type: ignore[arg-type]
    except (OSError, TypeError):
        raise AgentError(f"{where}: {key} {value!r} is not an IPv4 address") from None
    return value  # type: ignore[return-value]


def _want_alt(where: str, obj: dict[str, Any]) -> tuple[str | None, str | None]:
    """(alt_src_ip, alt_dst_ip), both or neither: a half pair could not carry a retry."""
    given = [k for k in ALT_KEYS if obj.get(k) is not None]
    if not given:
        return None, None
    if len(given) == 1:
        missing, = set(ALT_KEYS) - set(given)
        raise AgentError(f"{where}: {given[0]} without {missing}; expected both or neither")
    return _want_ip(where, obj, "alt_src_ip"), _want_ip(where, obj, "alt_dst_ip")


def parse_plan_line(where: str, line: str, name: str) -> PlannedTransfer:
    """Validate one plan line (``where`` names file and line for the error)."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise AgentError(f"{where}: not JSON ({exc.msg}); expected one transfer object a line") from None
    if not isinstance(obj, dict):
        raise AgentError(f"{where}: {type(obj).__name__} is not a transfer; expected a JSON object")
    if obj.get("src", name) != name:
        raise AgentError(f"{where}: src {obj.get('src')!r} is not this agent ({name!r})")
    start = obj.get("start")
    if not isinstance(start, (int, float)) or isinstance(start, bool) or not math.isfinite(start):
        raise AgentError(f"{where}: start {start!r} is not allowed; expected seconds after t0")
    request_id = obj.get("request_id")
    if request_id is not None and (not isinstance(request_id, int) or isinstance(request_id, bool)):
        raise AgentError(f"{where}: request_id {request_id!r} is not an integer")
    alt_src_ip, alt_dst_ip = _want_alt(where, obj)
    return PlannedTransfer(
        id=_want_int(where, obj, "id", 0, MAX_U64), request_id=request_id, src=name,
        dst=obj.get("dst"), src_ip=_want_ip(where, obj, "src_ip"), dst_ip=_want_ip(where, obj, "dst_ip"),
        dst_port=_want_int(where, obj, "dst_port", 1, 65535),
        bytes=_want_int(where, obj, "bytes", 0, MAX_U64), start=float(start),
        alt_src_ip=alt_src_ip, alt_dst_ip=alt_dst_ip)


def order_transfer(order: dict[str, Any], name: str) -> PlannedTransfer:
    """A coordinator's ``send`` order as a transfer due at ``due``; AgentError on a bad alternative pair
    (the rest is the coordinator's own bookkeeping and trusted as before)."""
    alt_src_ip, alt_dst_ip = _want_alt(f"order {order.get('id')!r}", order)
    return PlannedTransfer(order["id"], order.get("request_id"), name, order.get("dst"), order["src_ip"],
                           order["dst_ip"], order["dst_port"], order["bytes"], order["due"], alt_src_ip, alt_dst_ip)


def read_plan(path: str, name: str) -> list[PlannedTransfer]:
    """All transfers of a plan file, sorted by start; AgentError on any bad line."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as exc:
        raise AgentError(f"cannot read plan {path}: {exc.strerror}") from None
    plan: list[PlannedTransfer] = []
    seen: set[int] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        t = parse_plan_line(f"{path}:{number}", line, name)
        if t.id in seen:
            raise AgentError(f"{path}:{number}: transfer id {t.id} appears twice; expected unique ids")
        seen.add(t.id)
        plan.append(t)
    plan.sort(key=lambda t: (t.start, t.id))
    return plan


def parse_listen(text: str) -> tuple[str, int]:
    """``ip:port`` -> (ip, port); argparse turns the ValueError into a one-line error."""
    host, sep, port = text.rpartition(":")
    try:
        socket.inet_pton(socket.AF_INET, host)
        number = int(port)
    except (OSError, ValueError):
        number = -1
    if not sep or not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not ip:port (IPv4, port 0..65535)")
    return host, number


# --------------------------------------------------------------------------- receiver

class _Receiver(asyncio.BufferedProtocol):
    """One accepted connection. Reads land in the agent's one shared buffer, which is
    safe because asyncio calls buffer_updated right after recv_into, and the decoder
    consumes the bytes before returning (no per-connection buffer to allocate)."""

    def __init__(self, agent: Agent, local: str) -> None:
        self._agent = agent
        self._local = local
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None
        self._peer = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # acks must not wait for Nagle
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._agent.connections.add(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._agent.recv_buffer

    def buffer_updated(self, nbytes: int) -> None:
        now = time.monotonic()
        try:
            frames = self._decoder.feed(self._agent.recv_buffer[:nbytes], now)
        except FrameError as exc:
            self._agent.record_recv(Received(None, None, 0, False, now, now, str(exc)),
                                    self._peer, self._local)
            self.stop("bad frame")
            return
        assert self._transport is not None
        for frame in frames:
            self._agent.record_recv(frame, self._peer, self._local)
            self._transport.write(ACK.pack(ACK_MAGIC, frame.id, frame.received, frame.crc_ok))

    def eof_received(self) -> bool:
        self._finish("connection closed")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish(f"connection lost ({exc})" if exc else "connection closed")
        self._agent.connections.discard(self)

    def stop(self, why: str) -> None:
        """Record a frame cut short by ``why`` and close the connection."""
        self._finish(why)
        if self._transport is not None:
            self._transport.close()

    def _finish(self, why: str) -> None:
        cut = self._decoder.close(time.monotonic(), why)
        if cut is not None:
            self._agent.record_recv(cut, self._peer, self._local)


# --------------------------------------------------------------------------- sender

def _bound_socket(src_ip: str, dead_after: float = DEFAULT_DEAD_AFTER_S) -> socket.socket:
    """A non-blocking TCP socket bound to ``src_ip`` so routing sends it from that NIC port.

    IP_BIND_ADDRESS_NO_PORT defers the port choice to connect(), so thousands of
    short transfers do not run out of ephemeral ports held in TIME_WAIT.
    TCP_USER_TIMEOUT fails the connection (ETIMEDOUT) once sent data stays
    unacknowledged ``dead_after`` seconds: a cut cable only stalls TCP otherwise.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle stall on the tail
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, max(1, round(dead_after * 1000)))
        if hasattr(socket, "IP_BIND_ADDRESS_NO_PORT"):
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_BIND_ADDRESS_NO_PORT, 1)
        sock.bind((src_ip, 0))
    except BaseException:
        sock.close()
        raise
    return sock


async def _connect(loop: asyncio.AbstractEventLoop, sock: socket.socket, dst: tuple[str, int],
                   dead_after: float) -> None:
    """Connect within ``dead_after`` s; a SYN nobody answers is a dead path, not a slow one."""
    try:
        async with asyncio.timeout(dead_after):
            await loop.sock_connect(sock, dst)
    except TimeoutError as exc:
        if exc.errno:
            raise  # the kernel's own ETIMEDOUT
        raise TimeoutError(errno.ETIMEDOUT, f"connect not done within {dead_after:g} s (--dead-after)") from None


def _check_ack(raw: bytes, t: PlannedTransfer) -> tuple[int, str | None]:
    """(bytes the receiver counted, error or None) from an ack."""
    magic, transfer_id, nbytes, crc_ok = ACK.unpack(raw)
    if magic != ACK_MAGIC or transfer_id != t.id:
        return nbytes, f"bad ack (magic {magic!r}, id {transfer_id}); expected id {t.id}"
    if nbytes != t.bytes:
        return nbytes, f"receiver counted {nbytes} of {t.bytes} bytes"
    if not crc_ok:
        return nbytes, "receiver reported a crc mismatch"
    return nbytes, None


async def _exchange_sock(loop: asyncio.AbstractEventLoop, sock: socket.socket,
                         t: PlannedTransfer) -> bytes:
    """Send header + payload with loop.sock_sendall, read the ack with sock_recv."""
    await loop.sock_sendall(sock, frame_header(t.id, t.bytes))
    for piece in payload_pieces(t.id, t.bytes):
        await loop.sock_sendall(sock, piece)
    return await _read_ack(loop, sock)


async def _read_ack(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> bytes:
    """One whole ack; ConnectionError if the stream ends inside it."""
    ack = b""
    while len(ack) < ACK.size:
        chunk = await loop.sock_recv(sock, ACK.size - len(ack))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(ack)} of {ACK.size} ack bytes")
        ack += chunk
    return ack


async def _exchange_stream(loop: asyncio.AbstractEventLoop, sock: socket.socket,
                           t: PlannedTransfer) -> bytes:
    """The same over asyncio streams (kept to compare start lateness, see --io)."""
    reader, writer = await asyncio.open_connection(sock=sock)
    try:  # the transport owns the socket now; abort() unregisters it at once
        writer.write(frame_header(t.id, t.bytes))
        for piece in payload_pieces(t.id, t.bytes):
            writer.write(piece)
            await writer.drain()
        try:
            return await reader.readexactly(ACK.size)
        except asyncio.IncompleteReadError as exc:
            raise ConnectionError(f"connection closed after {len(exc.partial)} of {ACK.size} ack bytes") from None
    finally:
        writer.transport.abort()


Exchange = Callable[[asyncio.AbstractEventLoop, socket.socket, PlannedTransfer], Awaitable[bytes]]
EXCHANGES: dict[str, Exchange] = {"sock": _exchange_sock, "stream": _exchange_stream}


def _release(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    """Close a sender socket. A cancelled sock_sendall/sock_recv unregisters its fd only
    on a later loop turn, so drop the registrations first: a reused fd number must
    never inherit a stale one."""
    if sock.fileno() >= 0:
        loop.remove_reader(sock.fileno())
        loop.remove_writer(sock.fileno())
    sock.close()


def _error_text(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _is_dead(exc: BaseException) -> bool:
    """A failure of the path, not of the peer's checks, our own timeout or a stop: worth one retry."""
    return isinstance(exc, OSError) and exc.errno in DEAD_ERRNOS


@dataclass(slots=True)
class _Route:
    """The port pair a transfer's current attempt uses and what its attempts met, for its sent record."""

    src_ip: str
    dst_ip: str
    connected: float | None = None
    first_error: str | None = None

    def other(self, t: PlannedTransfer) -> tuple[str, str]:
        """The pair a retry takes: the other of planned/alternative, or the same one when there is no other."""
        if t.alt_src_ip is None or t.alt_dst_ip is None:
            return self.src_ip, self.dst_ip
        if (self.src_ip, self.dst_ip) == (t.src_ip, t.dst_ip):
            return t.alt_src_ip, t.alt_dst_ip
        return t.src_ip, t.dst_ip


class _Channel:
    """One persistent TCP connection from a NIC port to a peer's listener, reused by every
    transfer between them, like a queue pair of a KV transfer engine (Mooncake Transfer
    Engine, NIXL): transfers queue on it in order, their frames go back to back without
    waiting for acks, and the acks come back in the same order. A connection that fails
    fails what is queued or in flight on it; the next transfer opens a new one."""

    def __init__(self, src_ip: str, dst: tuple[str, int], dead_after: float = DEFAULT_DEAD_AFTER_S) -> None:
        self.src_ip, self.dst, self.dead_after = src_ip, dst, dead_after
        self.queue: asyncio.Queue[tuple[PlannedTransfer, asyncio.Future[bytes], list[float]]] = asyncio.Queue()
        self.inflight: collections.deque[tuple[PlannedTransfer, asyncio.Future[bytes]]] = collections.deque()
        self.sock: socket.socket | None = None
        self.reader: asyncio.Task[None] | None = None
        self.closed = False
        self.writer = asyncio.create_task(self._write())

    def submit(self, t: PlannedTransfer) -> tuple[asyncio.Future[bytes], list[float]]:
        """Queue ``t``; its ack arrives on the future, the time its header went out in the list."""
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        on_wire: list[float] = []
        self.queue.put_nowait((t, fut, on_wire))
        return fut, on_wire

    async def _write(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t, fut, on_wire = await self.queue.get()
            if fut.done():
                continue  # timed out or cancelled while queued
            try:
                if self.sock is None:
                    self.sock = _bound_socket(self.src_ip, self.dead_after)
                    await _connect(loop, self.sock, self.dst, self.dead_after)
                    self.reader = asyncio.create_task(self._read(self.sock))
                on_wire.append(time.monotonic())
                self.inflight.append((t, fut))
                await loop.sock_sendall(self.sock, frame_header(t.id, t.bytes))
                for piece in payload_pieces(t.id, t.bytes):
                    await loop.sock_sendall(self.sock, piece)
            except OSError as exc:
                if not fut.done() and (t, fut) not in self.inflight:
                    fut.set_exception(exc)
                self._fail(exc)

    async def _read(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                ack = await _read_ack(loop, sock)
                if not self.inflight:
                    raise ConnectionError("an ack arrived with no transfer in flight")
                _, fut = self.inflight.popleft()
                if not fut.done():
                    fut.set_result(ack)
        except OSError as exc:
            if sock is self.sock:
                self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        """Fail everything queued or in flight and drop the connection (the next transfer reconnects):
        what waits behind a dead connection is as stuck as what is on it."""
        err = exc if isinstance(exc, OSError) else ConnectionError(str(exc))
        waiting = [fut for _, fut in self.inflight]
        self.inflight.clear()
        while not self.queue.empty():
            waiting.append(self.queue.get_nowait()[1])
        for fut in waiting:
            if not fut.done():
                fut.set_exception(err)
        if self.reader is not None and self.reader is not asyncio.current_task():
            self.reader.cancel()
        self.reader = None
        if self.sock is not None:
            _release(asyncio.get_running_loop(), self.sock)
            self.sock = None
        if not self.closed and self.writer is not asyncio.current_task():
            self.writer.cancel()  # it may wait in a send on the released socket, which nothing will wake
            self.writer = asyncio.create_task(self._write())

    def close(self) -> None:
        self.closed = True
        self.writer.cancel()
        self._fail(ConnectionError("agent stopped"))


# --------------------------------------------------------------------------- agent

class Agent:
    """Receivers on every listen address plus the timed sender of one plan."""

    def __init__(self, name: str, listen: list[tuple[str, int]], plan: list[PlannedTransfer],
                 out_dir: str, t0: float | None, ready_file: str | None = None,
                 transfer_timeout: float = DEFAULT_TRANSFER_TIMEOUT_S, io: str = "sock",
                 connections: str = "persistent", control: str | None = None,
                 dead_after: float = DEFAULT_DEAD_AFTER_S, dead_hold: float = DEFAULT_DEAD_HOLD_S) -> None:
        self.name = name
        self.dead_after = dead_after
        self.dead_hold = dead_hold
        self._dead_until: dict[tuple[str, str], float] = {}  # (src_ip, dst_ip) -> monotonic end of its hold
        self.control = control
        self._control_out: asyncio.StreamWriter | None = None
        self._reports: list[str] = []
        self.listen = listen
        self.plan = plan
        self.out_dir = out_dir
        self.t0 = t0
        self.ready_file = ready_file
        self.transfer_timeout = transfer_timeout
        self.exchange = EXCHANGES[io]
        self.persistent = connections == "persistent"
        self._channels: dict[tuple[str, str, int], _Channel] = {}
        self.recv_buffer = memoryview(bytearray(RECV_BUFFER_BYTES))
        self.connections: set[_Receiver] = set()
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending = len(plan)
        self._started = 0
        self._stopping = False
        self._sent = RecordFile(os.path.join(out_dir, f"{name}.sent.jsonl"))
        self._recv = RecordFile(os.path.join(out_dir, f"{name}.recv.jsonl"))

    # -- records
    def record_recv(self, r: Received, peer: str, local: str) -> None:
        self._recv.write({"id": r.id, "peer": peer, "local": local, "bytes": r.received,
                          "expected_bytes": r.length, "crc_ok": r.crc_ok, "first_byte": r.first_byte,
                          "last_byte": r.last_byte, "verified": r.verified, "error": r.error})
        if r.id is not None and r.error is None:  # a cut frame is its sender's to retry or report
            self._report({"id": r.id, "t": r.last_byte, "ok": r.verified, "error": r.error})

    def _report(self, obj: dict[str, Any]) -> None:
        """Tell the coordinator (control mode only) what arrived or failed; lines of one loop turn
        go in one write."""
        if self._control_out is None:
            return
        if not self._reports:
            asyncio.get_running_loop().call_soon(self._flush_reports)
        self._reports.append(json.dumps(obj, separators=(",", ":")) + "\n")

    def _flush_reports(self) -> None:
        if self._control_out is not None and not self._control_out.is_closing():
            self._control_out.write("".join(self._reports).encode())
        self._reports.clear()

    def _record_sent(self, t: PlannedTransfer, route: _Route | None, start: float | None,
                     end: float | None, acked: int | None, error: str | None) -> None:
        route = route or _Route(t.src_ip, t.dst_ip)
        retried = route.first_error is not None
        if retried and error is not None:
            error = f"retry failed: {error} (first: {route.first_error})"
        self._sent.write({"id": t.id, "request_id": t.request_id, "src": t.src, "dst": t.dst,
                          "src_ip": t.src_ip, "dst_ip": t.dst_ip, "dst_port": t.dst_port,
                          "bytes": t.bytes, "scheduled_start": None if self.t0 is None else self.t0 + t.start,
                          "start": start,
                          "connected": route.connected, "end": end, "acked_bytes": acked,
                          "ok": error is None, "error": error,
                          "retried": retried, "first_error": route.first_error,
                          "sent_src_ip": route.src_ip, "sent_dst_ip": route.dst_ip,
                          "moved": (route.src_ip, route.dst_ip) != (t.src_ip, t.dst_ip)})
        if error is not None:
            self._report({"id": t.id, "failed": error} | ({"retried": True} if retried else {}))
        self._pending -= 1
        if self._pending == 0 and not self._stopping and self.control is None:
            _touch(os.path.join(self.out_dir, f"{self.name}.done"))

    # -- lifecycle
    async def bind(self) -> list[str]:
        """Start every listener; the bound ``ip:port`` list (port 0 resolved)."""
        loop = asyncio.get_running_loop()
        bound = []
        for host, port in self.listen:
            local = f"{host}:{port}"
            try:
                server = await loop.create_server(lambda local=local: _Receiver(self, local),
                                                  host, port, reuse_address=True, backlog=1024)
            except OSError as exc:
                raise AgentError(f"cannot listen on {local}: {exc.strerror or exc}") from None
            self._servers.append(server)
            bound.extend(f"{s.getsockname()[0]}:{s.getsockname()[1]}" for s in server.sockets)
        return bound

    async def run(self, stop: asyncio.Event) -> None:
        """Bind, announce readiness, replay the plan, serve until ``stop`` is set."""
        bound = await self.bind()
        if self.ready_file:
            _touch(self.ready_file, json.dumps({"name": self.name, "listen": bound}) + "\n")
        if self.control is not None:
            orders = asyncio.create_task(self._take_orders(stop))
            await stop.wait()
            await self.shutdown(orders)
            return
        if self.t0 is None:
            self.t0 = await _t0_from_stdin(stop)
        if not self.plan and self.t0 is not None:
            _touch(os.path.join(self.out_dir, f"{self.name}.done"))
        dispatcher = asyncio.create_task(self._dispatch() if self.t0 is not None else stop.wait())
        await stop.wait()
        await self.shutdown(dispatcher)

    async def _take_orders(self, stop: asyncio.Event) -> None:
        """Control mode: connect to the coordinator, then send each message it orders at once.

        ``due`` (when the coordinator ordered it) stands for the scheduled start, so lateness is
        the order's trip through the socket and this loop."""
        try:
            reader, self._control_out = await asyncio.open_unix_connection(self.control)
        except OSError as exc:
            print(f"traffic.runtime.agent: error: cannot reach the coordinator at {self.control}: {exc}",
                  file=sys.stderr)
            stop.set()
            return
        self._control_out.write((json.dumps({"hello": self.name}) + "\n").encode())
        self.t0 = 0.0
        while line := await reader.readline():
            order = json.loads(line)
            if order.get("op") == "stop":  # everything arrived; let the senders read their acks
                if self._tasks:
                    await asyncio.wait(set(self._tasks), timeout=self.transfer_timeout)
                break
            try:
                t = order_transfer(order, self.name)
            except AgentError as exc:
                print(f"traffic.runtime.agent: error: {exc}", file=sys.stderr)
                break
            self.plan.append(t)
            self._started += 1
            task = asyncio.create_task(self._transfer(t))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        stop.set()

    async def _dispatch(self) -> None:
        """Sleep on the loop's timer to each start time and launch that transfer's task.

        One timer at a time (not one per transfer) keeps the heap small with
        plans of many thousands of slices; no busy-wait, so lateness is about the
        epoll timeout granularity (1 ms) plus loop load.
        """
        loop = asyncio.get_running_loop()
        for t in self.plan:
            delay = self.t0 + t.start - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self._started += 1
            task = asyncio.create_task(self._transfer(t))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _transfer(self, t: PlannedTransfer) -> None:
        """Send ``t`` (on its pair's persistent connection or its own), retrying once after a dead
        connection, and wait for its ack; always leaves exactly one sent record. ``start`` is when it was
        due and handed over, ``connected`` when the last attempt connected (its own connection) or put
        its first byte on the wire (persistent: so its FCT includes waiting behind earlier transfers)."""
        start = time.monotonic()
        route = self._route(t)
        end = acked = error = None
        try:
            async with asyncio.timeout(self.transfer_timeout):
                ack = await self._with_retry(t, route)
            end = time.monotonic()
            acked, error = _check_ack(ack, t)
        except (TimeoutError, asyncio.CancelledError, OSError) as exc:
            error = self._failure(exc)
        self._record_sent(t, route, start, end, acked, error)

    def _route(self, t: PlannedTransfer) -> _Route:
        """The planned pair, or its alternative while the planned one is held dead (and the other is not)."""
        if t.alt_src_ip is not None and t.alt_dst_ip is not None and self._held(t.src_ip, t.dst_ip) \
                and not self._held(t.alt_src_ip, t.alt_dst_ip):
            return _Route(t.alt_src_ip, t.alt_dst_ip)
        return _Route(t.src_ip, t.dst_ip)

    def _held(self, src_ip: str, dst_ip: str) -> bool:
        """A dead connection on this pair ended less than ``dead_hold`` ago."""
        return time.monotonic() < self._dead_until.get((src_ip, dst_ip), -math.inf)

    async def _with_retry(self, t: PlannedTransfer, route: _Route) -> bytes:
        """One attempt; after a dead connection, hold its pair dead and make one more, whole, on a fresh
        connection over the other pair (an RDMA NIC's retry-exceeded, then the engine resubmits elsewhere)."""
        attempt = self._on_channel if self.persistent else self._on_own_connection
        try:
            return await attempt(t, route)
        except OSError as exc:
            if self._stopping or not _is_dead(exc):
                raise
            self._dead_until[(route.src_ip, route.dst_ip)] = time.monotonic() + self.dead_hold
            route.first_error = _error_text(exc)
            route.src_ip, route.dst_ip = route.other(t)
            route.connected = None
        return await attempt(t, route)

    async def _on_channel(self, t: PlannedTransfer, route: _Route) -> bytes:
        """Queue ``t`` on the persistent connection of ``route``'s pair; its ack."""
        key = (route.src_ip, route.dst_ip, t.dst_port)
        channel = self._channels.get(key)
        if channel is None:
            channel = self._channels[key] = _Channel(route.src_ip, (route.dst_ip, t.dst_port), self.dead_after)
        fut, on_wire = channel.submit(t)
        try:
            return await asyncio.shield(fut)
        finally:
            if not fut.done():
                fut.cancel()
            route.connected = on_wire[0] if on_wire else None

    async def _on_own_connection(self, t: PlannedTransfer, route: _Route) -> bytes:
        """Connect from ``route``'s source to its destination, send, read the ack; close."""
        loop = asyncio.get_running_loop()
        sock = _bound_socket(route.src_ip, self.dead_after)
        try:
            await _connect(loop, sock, (route.dst_ip, t.dst_port), self.dead_after)
            route.connected = time.monotonic()
            return await self.exchange(loop, sock, t)
        finally:
            _release(loop, sock)

    def _failure(self, exc: BaseException) -> str:
        """A failed transfer's error text: our timeout (no errno) or the kernel's, a stop, or the OS's."""
        if isinstance(exc, asyncio.CancelledError):
            return "cancelled: agent stopped before the transfer ended"
        if isinstance(exc, TimeoutError) and not exc.errno:
            return f"timeout after {self.transfer_timeout:g} s"
        return _error_text(exc)

    async def shutdown(self, dispatcher: asyncio.Task[None]) -> None:
        """Stop listening, record unfinished work as failed, flush."""
        self._stopping = True
        dispatcher.cancel()
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for t in self.plan[self._started:]:
            self._record_sent(t, None, None, None, None, "not started: agent stopped first")
        for channel in self._channels.values():
            channel.close()
        for conn in list(self.connections):
            conn.stop("agent stopped")
        for server in self._servers:
            await server.wait_closed()
        self._sent.close()
        self._recv.close()


async def _t0_from_stdin(stop: asyncio.Event) -> float | None:
    """The start time, one line on stdin; None when told to stop first. A closed
    stdin means the orchestrator is gone: nothing will ever start."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    line_task = asyncio.ensure_future(reader.readline())
    stop_task = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({line_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop_task.cancel()
        transport.close()
    if not line_task.done():
        line_task.cancel()
        return None
    line = line_task.result().decode().strip()
    try:
        t0 = float(line)
    except ValueError:
        t0 = math.nan
    if not math.isfinite(t0):
        stop.set()
        if line:
            print(f"traffic.runtime.agent: error: t0 {line!r} on stdin is not a finite number", file=sys.stderr)
        return None
    return t0


# --------------------------------------------------------------------------- command line

class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument on one line (no usage block), status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number > 0")
    return value


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number >= 0")
    return value


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def make_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="traffic.runtime.agent", description="Replay one GPU host's KV transfers and receive others'.")
    p.add_argument("--name", required=True, help="agent name, e.g. gpu3 (names the output files)")
    p.add_argument("--listen", required=True, action="append", type=parse_listen, metavar="IP:PORT",
                   help="receive on this address (repeat for each NIC port)")
    p.add_argument("--plan", help="JSON-lines file of this agent's outgoing transfers")
    p.add_argument("--control", metavar="SOCKET",
                   help="take orders from the coordinator on this Unix socket instead of a plan")
    p.add_argument("--out", required=True, help="directory for <name>.sent/.recv.jsonl and <name>.done")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--t0", type=_finite, help="CLOCK_MONOTONIC seconds that plan starts count from")
    start.add_argument("--t0-stdin", action="store_true",
                       help="read t0 as one line on stdin once every listener is bound")
    p.add_argument("--ready-file", help="written once every listener is bound")
    p.add_argument("--transfer-timeout", type=_positive, default=DEFAULT_TRANSFER_TIMEOUT_S,
                   help="seconds before a transfer is recorded as failed (default 60)")
    p.add_argument("--dead-after", type=_positive, default=DEFAULT_DEAD_AFTER_S, metavar="SECONDS",
                   help="a connection whose sent data stays unacknowledged this long, or whose connect takes "
                        "this long, is dead (TCP_USER_TIMEOUT; default 1)")
    p.add_argument("--dead-hold", type=_non_negative, default=DEFAULT_DEAD_HOLD_S, metavar="SECONDS",
                   help="after a dead connection on a port pair, send new transfers planned on it over the other "
                        "pair for this long, then try it again (default 2)")
    p.add_argument("--connections", choices=CONNECTION_MODES, default=CONNECTION_MODES[0],
                   help="one persistent connection per (source port, destination port), reused by every "
                        "transfer (default), or a new connection per transfer")
    p.add_argument("--io", choices=IO_MODES, default="sock",
                   help="sender data path: loop.sock_sendall (default) or asyncio streams")
    return p


async def _main(args: argparse.Namespace, plan: list[PlannedTransfer]) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    agent = Agent(args.name, args.listen, plan, args.out, args.t0, args.ready_file,
                  args.transfer_timeout, args.io, args.connections, args.control, args.dead_after,
                  args.dead_hold)
    await agent.run(stop)


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        if not args.name or os.sep in args.name:
            raise AgentError(f"--name {args.name!r} is not allowed; expected a plain name like gpu3")
        if (args.plan is None) == (args.control is None):
            raise AgentError("give exactly one of --plan FILE or --control SOCKET")
        if args.control is None and args.t0 is None and not args.t0_stdin:
            raise AgentError("--plan needs --t0 or --t0-stdin")
        plan = read_plan(args.plan, args.name) if args.plan else []
        try:
            os.makedirs(args.out, exist_ok=True)
        except OSError as exc:
            raise AgentError(f"cannot create --out {args.out}: {exc.strerror}") from None
        asyncio.run(_main(args, plan))
    except AgentError as exc:
        print(f"traffic.runtime.agent: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
