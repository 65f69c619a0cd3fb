"""Bulk TCP source and sink for many flows from one emulated GPU (standard library only).

iperf3 runs one test per server process, so an all-to-all of n GPUs would
need thousands of processes; this runs one process per GPU instead. It
listens on the GPU's addresses, opens one connection per ``--connect``
target (bound to the given source address, so the host's routing picks the
NIC port), sends as fast as TCP lets it from ``--start`` (CLOCK_MONOTONIC,
shared by every namespace) for ``--duration`` seconds, and counts the bytes
each incoming flow delivered between start+omit and start+duration.

Prints one JSON object: {"received": {"<src ip>><dst ip>": bytes}, "window_s": s,
"retransmits": TCP segments this namespace retransmitted meanwhile}.
Run as a script: ``python3 bulk.py --listen IP:PORT ... --connect SRC>DST:PORT ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

CHUNK = memoryview(b"\x5a" * 65536)


async def _sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, counts: dict, window: tuple) -> None:
    peer, local = writer.get_extra_info("peername")[0], writer.get_extra_info("sockname")[0]
    key = f"{peer}>{local}"
    counts.setdefault(key, 0)
    lo, hi = window
    try:
        while data := await reader.read(262144):
            now = time.monotonic()
            if lo <= now <= hi:
                counts[key] += len(data)
    except ConnectionError:
        pass
    writer.close()


async def _source(src: str, dst: str, port: int, start: float, end: float) -> None:
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    try:
        _, writer = await asyncio.open_connection(dst, port, local_addr=(src, 0))
    except OSError:
        return  # the sink reports zero bytes for this flow
    try:
        while time.monotonic() < end:
            writer.write(CHUNK)
            await writer.drain()
    except ConnectionError:
        pass
    writer.close()


def tcp_retransmits() -> int:
    """RetransSegs of this network namespace (one bulk process per namespace)."""
    with open("/proc/net/snmp") as fh:
        rows = [line.split() for line in fh if line.startswith("Tcp:")]
    return int(rows[1][rows[0].index("RetransSegs")])


async def _main(args) -> dict:
    retrans0 = tcp_retransmits()
    counts: dict[str, int] = {}
    window = (args.start + args.omit, args.start + args.duration)
    servers = []
    for listen in args.listen:
        ip, port = listen.rsplit(":", 1)
        servers.append(await asyncio.start_server(lambda r, w: _sink(r, w, counts, window), ip, int(port)))
    sources = []
    for target in args.connect:
        src, rest = target.split(">", 1)
        dst, port = rest.rsplit(":", 1)
        sources.append(_source(src, dst, int(port), args.start, args.start + args.duration))
    tasks = [asyncio.ensure_future(src) for src in sources]
    # a flow stuck in retransmission backoff must not hold the measurement up
    await asyncio.wait(tasks, timeout=max(0.0, args.start + args.duration + 0.5 - time.monotonic()))
    for task in tasks:
        task.cancel()
    await asyncio.sleep(max(0.0, args.start + args.duration + args.linger - time.monotonic()))
    for s in servers:
        s.close()
    return {"received": counts, "window_s": args.duration - args.omit, "retransmits": tcp_retransmits() - retrans0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", action="append", default=[], help="IP:PORT to accept flows on (repeatable)")
    p.add_argument("--connect", action="append", default=[], help="SRC_IP>DST_IP:PORT flow to send (repeatable)")
    p.add_argument("--start", type=float, required=True, help="CLOCK_MONOTONIC time the sources start")
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--omit", type=float, default=3.0, help="seconds of slow start not counted")
    p.add_argument("--linger", type=float, default=1.0, help="seconds the sinks stay after the sources stop")
    args = p.parse_args()
    if not 0 <= args.omit < args.duration:
        p.error(f"--omit {args.omit} must be at least 0 and below --duration {args.duration}")
    print(json.dumps(asyncio.run(_main(args))))


if __name__ == "__main__":
    main()
