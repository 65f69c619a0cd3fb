"""PFC across hosts: a pause whose transmitter is on another host travels as a real 802.1Qbb frame.

On one host the pause daemon pauses a feeder by changing its tbf (``tbfmsg``). When the feeder
is on another host (its cable is a tunnel, ``testbed/emulation/hosts/tunnels.py``), the daemon
that saw the XOFF crossing (host B) does what a switch does: it sends a PFC frame out of the
port the congested traffic comes in on, i.e. into its end of that cable's tunnel. It arrives on
the transmitter's host (A) at the other end of the tunnel, where A's daemon reads it from a
packet socket and pauses the transmitter through its usual path (tbf change, kick frame,
reference counts, latency measurement); a frame with zero quanta resumes it.

The frame (IEEE 802.1Qbb, MAC control): destination 01:80:c2:00:00:01, ethertype 0x8808,
opcode 0x0101, class-enable vector 0x0001 (the one emulated priority), eight 2-byte pause times
in quanta of 512 bit times (priority 0's is set, the others 0), then 26 bytes of padding. A real
switch ignores the padding; here it carries what the receiver logs and measures with: a magic
``tbX1``, the XOFF/XON crossing's kernel time (CLOCK_MONOTONIC ns on the sender) and the
congested queue's id (the pause's cause). Frames without the magic (the daemon's own kick
frames, which also cross the tunnel) are ignored.

Quanta are honoured: an XOFF pauses for ``quanta x 512 / rate`` (0xFFFF quanta: 11.2 s at
3 Mbit/s) unless refreshed; the sender refreshes every quarter of that while it still holds the
feeder, as real PFC does, and a host that dies leaves its pauses to run out.

Accounting follows real PFC: a pause is per cable (the receiver cannot know causes), so the
sender reference-counts its causes per remote feeder and sends XOFF on the first, XON when the
last lets go; the receiver holds its transmitter once per cable.
"""

from __future__ import annotations

import ctypes
import select
import socket
import struct
import time
from dataclasses import dataclass

ETH_P_ALL = 0x0003
ETH_P_PAUSE = 0x8808
PFC_OPCODE = 0x0101
PFC_DST = bytes.fromhex("0180c2000001")
MAGIC = b"tbX1"
MAX_QUANTA = 0xFFFF
PAD = 26
CAUSE_BYTES = PAD - len(MAGIC) - 8
SOL_PACKET, PACKET_IGNORE_OUTGOING = 263, 23
SO_ATTACH_FILTER = 26
PACKET_OUTGOING = 4
SRC_MAC = b"\x02\xff\x00\x00\x00\x03"
# classic BPF: keep (96 bytes of) frames whose ethertype is 0x8808, drop everything else in the kernel
_FILTER = ((0x28, 0, 0, 12), (0x15, 0, 1, ETH_P_PAUSE), (0x06, 0, 0, 96), (0x06, 0, 0, 0))


def frame(quanta: int, crossed_ns: int, cause: str, src_mac: bytes = SRC_MAC) -> bytes:
    """A PFC frame for priority 0 (``quanta`` 0 resumes) carrying the crossing time and cause."""
    if not 0 <= quanta <= MAX_QUANTA:
        raise ValueError(f"quanta {quanta} out of 0 .. {MAX_QUANTA}")
    c = cause.encode()
    if len(c) > CAUSE_BYTES:
        raise ValueError(f"cause {cause!r} longer than {CAUSE_BYTES} bytes")
    head = PFC_DST + src_mac + struct.pack("!H", ETH_P_PAUSE)
    body = struct.pack("!HHH", PFC_OPCODE, 0x0001, quanta) + b"\0" * 14
    pad = MAGIC + struct.pack("!Q", crossed_ns) + c.ljust(CAUSE_BYTES, b"\0")
    return head + body + pad


@dataclass(frozen=True)
class Pause:
    """A decoded frame: priority 0's quanta (0 = resume), the crossing's time and queue."""

    quanta: int
    crossed_ns: int
    cause: str


def parse(buf: bytes) -> Pause | None:
    """The pause a frame carries, or None (not PFC, priority 0 not enabled, or not one of ours)."""
    if len(buf) < 60 or buf[:6] != PFC_DST or struct.unpack_from("!H", buf, 12)[0] != ETH_P_PAUSE:
        return None
    opcode, cev, quanta = struct.unpack_from("!HHH", buf, 14)
    if opcode != PFC_OPCODE or not cev & 1 or buf[34:38] != MAGIC:
        return None
    crossed = struct.unpack_from("!Q", buf, 38)[0]
    cause = buf[46:46 + CAUSE_BYTES].rstrip(b"\0").decode(errors="replace")
    return Pause(quanta, crossed, cause)


def quanta_ns(quanta: int, rate_bps: float) -> int:
    """How long ``quanta`` pause a link of ``rate_bps`` (one quantum = 512 bit times)."""
    return int(quanta * 512 / rate_bps * 1e9)


def _attach_filter(sock: socket.socket) -> None:
    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                    ("k", ctypes.c_uint32)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(SockFilter))]

    prog = (SockFilter * len(_FILTER))(*[SockFilter(*f) for f in _FILTER])
    fprog = SockFprog(len(_FILTER), prog)
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, bytes(memoryview(fprog)))


def receive_socket(dev: str) -> socket.socket:
    """A packet socket on ``dev`` that sees arriving PFC frames only: ETH_P_ALL, so it runs before
    tc ingress and the bridge (a Linux bridge drops MAC control frames), with a kernel filter on the
    ethertype and outgoing packets skipped (the data the tunnel carries out costs nothing here)."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    _attach_filter(s)
    try:
        s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    except OSError:
        pass  # kernels before 4.20: outgoing frames are skipped by pkttype below
    s.bind((dev, ETH_P_ALL))
    s.setblocking(False)
    return s


def send_socket(dev: str) -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((dev, 0))
    s.setblocking(False)
    return s


class Receiver:
    """The tunnel ends whose arriving PFC frames pause this host's transmitters."""

    def __init__(self, pause_rx: dict[str, str], open_socket=receive_socket) -> None:
        self.tx_of = dict(pause_rx)  # tunnel device -> the local transmitter (queue id) it pauses
        self.socks = {dev: open_socket(dev) for dev in pause_rx}
        self.dev_of = {s.fileno(): dev for dev, s in self.socks.items()}
        self.frames = self.ignored = 0

    @property
    def fds(self) -> list[int]:
        return list(self.dev_of)

    def read(self) -> list[tuple[str, Pause]]:
        """Every frame waiting on any tunnel, as (device, pause)."""
        out = []
        for dev, s in self.socks.items():
            while True:
                try:
                    buf, addr = s.recvfrom(128)
                except (BlockingIOError, InterruptedError):
                    break
                if len(addr) > 2 and addr[2] == PACKET_OUTGOING:
                    continue
                p = parse(buf)
                if p is None:
                    self.ignored += 1
                    continue
                self.frames += 1
                out.append((dev, p))
        return out

    def close(self) -> None:
        for s in self.socks.values():
            s.close()


class RemoteFeeders:
    """The sending side: feeders of this host's queues that sit on other hosts, each reached through
    the tunnel of its cable. ``hold``/``release`` count causes; a frame goes out on the first hold,
    the last release, and as a refresh while held."""

    def __init__(self, remote_feeders: dict[str, str], rate_bps: float, open_socket=send_socket,
                 clock=time.monotonic_ns) -> None:
        self.dev_of = dict(remote_feeders)  # feeder queue id -> tunnel device here
        self.socks = {dev: open_socket(dev) for dev in set(remote_feeders.values())}
        self.holders: dict[str, int] = dict.fromkeys(remote_feeders, 0)
        self.last: dict[str, tuple[int, str]] = {}  # feeder -> (crossing ns, cause) of its last XOFF
        self.refresh_ns = quanta_ns(MAX_QUANTA, rate_bps) // 4
        self.next_refresh: dict[str, int] = {}
        self.clock = clock
        self.sent = {"xoff": 0, "xon": 0, "refresh": 0, "errors": 0}
        self.log: list[str] = []  # pfc_remote.txt lines: time kind feeder tunnel cause crossed_ns

    def __contains__(self, feeder: str) -> bool:
        return feeder in self.dev_of

    def _send(self, feeder: str, quanta: int, crossed_ns: int, cause: str, kind: str) -> None:
        dev = self.dev_of[feeder]
        try:
            self.socks[dev].send(frame(quanta, crossed_ns, cause))
            self.sent[kind] += 1
        except OSError:
            self.sent["errors"] += 1
        self.log.append(f"{self.clock()} {kind} {feeder} {dev} {cause} {crossed_ns}\n")

    def hold(self, feeder: str, cause: str, crossed_ns: int) -> bool:
        """One more cause holds ``feeder``; True if this sent its XOFF (it was running)."""
        self.holders[feeder] += 1
        if self.holders[feeder] > 1:
            return False
        self.last[feeder] = (crossed_ns, cause)
        self._send(feeder, MAX_QUANTA, crossed_ns, cause, "xoff")
        self.next_refresh[feeder] = self.clock() + self.refresh_ns
        return True

    def release(self, feeder: str, cause: str, crossed_ns: int) -> bool:
        """One cause lets go; True if this was the last and its XON went out."""
        if self.holders.get(feeder, 0) == 0:
            return False
        self.holders[feeder] -= 1
        if self.holders[feeder]:
            return False
        self.next_refresh.pop(feeder, None)
        self._send(feeder, 0, crossed_ns, cause, "xon")
        return True

    def refresh(self) -> int:
        """Re-send XOFF for feeders held longer than a refresh period (before their quanta run out)."""
        now, n = self.clock(), 0
        for feeder, due in list(self.next_refresh.items()):
            if now >= due:
                crossed, cause = self.last[feeder]
                self._send(feeder, MAX_QUANTA, crossed, cause, "refresh")
                self.next_refresh[feeder] = now + self.refresh_ns
                n += 1
        return n

    def release_all(self, cause: str = "exit") -> None:
        for feeder, n in self.holders.items():
            if n:
                self.holders[feeder] = 1
                self.release(feeder, cause, self.clock())

    @property
    def held(self) -> list[str]:
        return sorted(f for f, n in self.holders.items() if n)

    def close(self) -> None:
        for s in self.socks.values():
            s.close()


class OtherHosts:
    """The pause daemon's side of it (a mixin of ``pfcd.PauseDaemon``, which provides ``policy``,
    ``bell``, ``held``, ``_hold`` and ``_xon``): feeders on other hosts get frames through their
    cable's tunnel (``remote``); frames arriving on this host's tunnels pause its transmitters
    (``rx``), held once per cable under the key ``cable:<tunnel>``."""

    def init_other_hosts(self, policy: dict) -> None:
        remote, rx = policy.get("remote_feeders") or {}, policy.get("pause_rx") or {}
        self.remote = RemoteFeeders(remote, policy["rate_bps"]) if remote else None
        self.rx = Receiver(rx) if rx else None
        self.rx_ready = False
        self.remote_until: dict[str, int] = {}  # "cable:<tunnel>" held here -> when its quanta run out
        self.remote_offset_ns = int(policy.get("clock_offset_ns", 0))  # the other hosts' clocks minus ours

    def wait(self, timeout_s: float) -> bool:
        """Sleep until the doorbell rings, a PFC frame arrives from another host, or ``timeout_s``."""
        if self.rx is None:
            return self.bell.wait(timeout_s)
        ready, _, _ = select.select([self.bell.fd, *self.rx.fds], [], [], timeout_s)
        if self.bell.fd in ready:
            self.bell.skip()
            self.bell.rings += 1
        self.rx_ready = len(ready) > (self.bell.fd in ready)
        return bool(ready)

    def remote_step(self) -> None:
        """Frames from other hosts' daemons (one hold per cable, as PFC pauses a link: the sender
        counts its causes), quanta that ran out, and refreshes of the pauses this host sends."""
        if self.rx is not None:
            now = time.monotonic_ns()
            if self.rx_ready:
                self.rx_ready = False
                for dev, p in self.rx.read():
                    key = f"cable:{dev}"
                    crossed = p.crossed_ns - self.remote_offset_ns
                    if p.quanta:
                        self.remote_until[key] = now + quanta_ns(p.quanta, self.policy["rate_bps"])
                        if key not in self.held:
                            self.held[key] = set()
                            self._hold(key, [self.rx.tx_of[dev]], crossed, now, log_cause=p.cause)
                    elif key in self.held:
                        self.remote_until.pop(key, None)
                        self._xon(key, now, crossed=crossed, log_cause=p.cause)
            for key, until in list(self.remote_until.items()):
                if now >= until:  # the sender went quiet for the whole pause: it ran out
                    del self.remote_until[key]
                    self._xon(key, now, crossed=until, log_cause="expired")
        if self.remote is not None:
            self.remote.refresh()
