"""Bulk TCP source and sink for many flows from one emulated GPU (standard library only).

iperf3 runs one test per server process, so an all-to-all of n GPUs would
need thousands of processes; this runs one process per GPU instead. It
listens on the GPU's addresses, opens one connection per ``--connect``
target (bound to the given source address, so the host's routing picks the
NIC port), sends as fast as TCP lets it from ``--start`` (CLOCK_MONOTONIC,
shared by every namespace) for ``--duration`` seconds, and counts the bytes
each incoming flow delivered between start+omit and start+duration.

Prints one JSON object: {"received": {"<src ip>><dst ip>": bytes}, "window_s": s,
"retransmits": TCP segments this namespace retransmitted meanwhile}. With ``--bins-ms B`` also
"bins": {flow: [[bin, bytes], ...]} (bytes each flow delivered per B ms since start, empty bins
left out: when a flow stalled and when it came back), "sent": {flow: [TCP_INFO {"bytes_retrans",
"total_retrans", "bytes_acked"} at each ``--marks`` time, then as it stops]} and "probes":
{"src:sport>dst": [[seq, sent ms, arrived ms], ...]} (since start) for ``--probe`` UDP streams.
Run as a script: ``python3 bulk.py --listen IP:PORT ... --connect SRC>DST:PORT ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import struct
import time

CHUNK = memoryview(b"\x5a" * 65536)


# struct tcp_info (linux/tcp.h): tcpi_ca_state (u8) at 1, tcpi_backoff (u8) at 4, tcpi_rto (u32, us) at 8,
# tcpi_total_retrans (u32) at 100, tcpi_bytes_acked (u64) at 120, tcpi_bytes_retrans (u64) at 208
TCP_INFO_LEN = 216


def parse_tcp_info(raw: bytes) -> dict:
    """What TCP resent on this connection (segments, bytes), the bytes the peer acknowledged, and whether the
    sender is waiting out a retransmission timer: ``backoff`` (times the RTO doubled), ``ca_state`` (4: Loss),
    ``rto_us``."""
    if len(raw) < TCP_INFO_LEN:
        return {}
    return {"total_retrans": struct.unpack_from("I", raw, 100)[0], "bytes_acked": struct.unpack_from("Q", raw, 120)[0],
            "bytes_retrans": struct.unpack_from("Q", raw, 208)[0], "ca_state": raw[1], "backoff": raw[4],
            "rto_us": struct.unpack_from("I", raw, 8)[0]}


def tcp_info(sock: socket.socket) -> dict:
    return parse_tcp_info(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN))


async def _sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, counts: dict, window: tuple,
                bins: dict | None, start: float, bin_s: float) -> None:
    peer, local = writer.get_extra_info("peername")[0], writer.get_extra_info("sockname")[0]
    key = f"{peer}>{local}"
    counts.setdefault(key, 0)
    mine = bins.setdefault(key, {}) if bins is not None else None
    lo, hi = window
    try:
        while data := await reader.read(262144):
            now = time.monotonic()
            if lo <= now <= hi:
                counts[key] += len(data)
            if mine is not None:
                b = int((now - start) / bin_s)
                mine[b] = mine.get(b, 0) + len(data)
    except ConnectionError:
        pass
    writer.close()


async def _sample(sock: socket.socket, marks: list[float], into: list) -> None:
    """TCP_INFO of ``sock`` at each mark (CLOCK_MONOTONIC), so what a sender resent can be split by phase."""
    for mark in marks:
        await asyncio.sleep(max(0.0, mark - time.monotonic()))
        try:
            into.append(tcp_info(sock))
        except OSError:
            into.append({})


async def _source(src: str, dst: str, port: int, start: float, end: float, sent: dict, marks: list[float]) -> None:
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    try:
        _, writer = await asyncio.open_connection(dst, port, local_addr=(src, 0))
    except OSError:
        return  # the sink reports zero bytes for this flow
    sock = writer.get_extra_info("socket")
    infos: list = []
    sampler = asyncio.ensure_future(_sample(sock, marks, infos))
    try:
        while time.monotonic() < end:
            writer.write(CHUNK)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        sampler.cancel()
        try:
            infos.append(tcp_info(sock))
        except OSError:
            infos.append({})
        sent[f"{src}>{dst}"] = infos
    writer.close()


PROBE = struct.Struct("!Qd")  # sequence number, send time (CLOCK_MONOTONIC, shared by every namespace)


SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
TIMESPEC = struct.Struct("@qq")


class _ProbeSink:
    """Keeps every probe datagram per sender (address and port): sequence, send and arrival ms since start.
    The arrival is the kernel's receive timestamp, so a sink process waiting for the CPU does not delay it."""

    def __init__(self, local: str, port: int, got: dict, start: float) -> None:
        self.local, self.got, self.start = local, got, start
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock.setblocking(False)
        self.sock.bind((local, port))
        self.mono_minus_real = time.monotonic() - time.time()  # the kernel stamps CLOCK_REALTIME
        asyncio.get_running_loop().add_reader(self.sock.fileno(), self._read)

    def _read(self) -> None:
        while True:
            try:
                data, anc, _, addr = self.sock.recvmsg(64, 64)
            except BlockingIOError:
                return
            if len(data) != PROBE.size:
                continue
            seq, sent = PROBE.unpack(data)
            now = time.monotonic()
            for level, kind, raw in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, ns = TIMESPEC.unpack(raw[:TIMESPEC.size])
                    now = sec + ns / 1e9 + self.mono_minus_real
            self.got.setdefault(f"{addr[0]}:{addr[1]}>{self.local}", []).append(
                (seq, round((sent - self.start) * 1e3, 2), round((now - self.start) * 1e3, 2)))

    def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self.sock.fileno())
        self.sock.close()


async def _probe(targets: list[str], start: float, end: float, every_s: float) -> None:
    """One small UDP datagram per target every ``every_s``: its arrivals show when a path died and when the
    switches forwarded on another, without TCP's retransmission timers in between."""
    socks = []
    for target in targets:
        target, windows = probe_windows(target)
        src, rest = target.split(">", 1)
        dst, port = rest.rsplit(":", 1)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setblocking(False)
        s.bind((src, 0))
        s.connect((dst, int(port)))
        socks.append((s, [(start + lo, start + hi) for lo, hi in windows]))
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    seq = 0
    while (now := time.monotonic()) < end:
        for s, windows in socks:
            if windows and not any(lo <= now < hi for lo, hi in windows):
                continue
            try:
                s.send(PROBE.pack(seq, time.monotonic()))
            except OSError:
                pass  # no route or a full queue: the gap shows at the sink
        seq += 1
        await asyncio.sleep(max(0.0, start + seq * every_s - now))
    for s, _ in socks:
        s.close()


def probe_windows(target: str) -> tuple[str, list[tuple[float, float]]]:
    """``SRC>DST:PORT[@LO-HI,LO-HI...]``: the stream and the windows (seconds after the start) it sends in;
    no windows: all the time. A stream's sequence numbers count every tick, so a gap between windows is no
    loss."""
    stream, _, spec = target.partition("@")
    windows = []
    for part in filter(None, spec.split(",")):
        lo, hi = part.split("-")
        windows.append((float(lo), float(hi)))
    return stream, windows


def tcp_retransmits() -> int:
    """RetransSegs of this network namespace (one bulk process per namespace)."""
    with open("/proc/net/snmp") as fh:
        rows = [line.split() for line in fh if line.startswith("Tcp:")]
    return int(rows[1][rows[0].index("RetransSegs")])


async def _main(args) -> dict:
    retrans0 = tcp_retransmits()
    counts: dict[str, int] = {}
    bins: dict | None = {} if args.bins_ms else None
    sent: dict[str, dict] = {}
    window = (args.start + args.omit, args.start + args.duration)
    servers = []
    probes: dict = {}
    marks = [float(m) for m in args.marks.split(",")] if args.marks else []
    for listen in args.listen:
        ip, port = listen.rsplit(":", 1)
        servers.append(await asyncio.start_server(
            lambda r, w: _sink(r, w, counts, window, bins, args.start, (args.bins_ms or 1) / 1e3), ip, int(port)))
        if args.probe_ms:
            servers.append(_ProbeSink(ip, int(port), probes, args.start))
    sources = []
    for target in args.connect:
        src, rest = target.split(">", 1)
        dst, port = rest.rsplit(":", 1)
        sources.append(_source(src, dst, int(port), args.start, args.start + args.duration, sent, marks))
    if args.probe:
        sources.append(_probe(args.probe, args.start, args.start + args.duration, args.probe_ms / 1e3))
    tasks = [asyncio.ensure_future(src) for src in sources]
    # a flow stuck in retransmission backoff must not hold the measurement up
    await asyncio.wait(tasks, timeout=max(0.0, args.start + args.duration + 0.5 - time.monotonic()))
    for task in tasks:
        task.cancel()
    await asyncio.sleep(max(0.0, args.start + args.duration + args.linger - time.monotonic()))
    for s in servers:
        s.close()
    out = {"received": counts, "window_s": args.duration - args.omit, "retransmits": tcp_retransmits() - retrans0}
    if bins is not None:
        out["bins"] = {k: sorted(v.items()) for k, v in bins.items()}
        out["sent"] = sent
        out["probes"] = probes
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", action="append", default=[], help="IP:PORT to accept flows on (repeatable)")
    p.add_argument("--connect", action="append", default=[], help="SRC_IP>DST_IP:PORT flow to send (repeatable)")
    p.add_argument("--start", type=float, required=True, help="CLOCK_MONOTONIC time the sources start")
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--omit", type=float, default=3.0, help="seconds of slow start not counted")
    p.add_argument("--linger", type=float, default=1.0, help="seconds the sinks stay after the sources stop")
    p.add_argument("--bins-ms", type=float, default=0,
                   help="also report each flow's delivered bytes per this many ms, and its sender's TCP_INFO")
    p.add_argument("--marks", help="comma-separated CLOCK_MONOTONIC times to sample each sender's TCP_INFO at")
    p.add_argument("--probe", action="append", default=[],
                   help="SRC_IP>DST_IP:PORT[@LO-HI,...] UDP probe stream, sending only in those windows (seconds "
                        "after --start) if given (repeatable)")
    p.add_argument("--probe-ms", type=float, default=0, help="ms between probe datagrams; 0: no probe sink")
    args = p.parse_args()
    if not 0 <= args.omit < args.duration:
        p.error(f"--omit {args.omit} must be at least 0 and below --duration {args.duration}")
    print(json.dumps(asyncio.run(_main(args))))


if __name__ == "__main__":
    main()
