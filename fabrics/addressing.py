"""The one address plan every part of the testbed uses.

A NIC port is named by (GPU, port): GPUs are numbered from 1, ports are 1 and 2.

* IPv4: ``10.<port>.<gpu // 256>.<gpu % 256>``, prefix /16. Port 1 addresses
  live in 10.1.0.0/16 and port 2 addresses in 10.2.0.0/16, so the address of
  a destination says which *plane* (port) it is on. GPU 5 port 1 is 10.1.0.5,
  GPU 300 port 2 is 10.2.1.44.
* MAC: ``02:00:0a:0<port>:HH:LL`` with HHLL the GPU number in hex (locally
  administered, unicast), e.g. GPU 5 port 1 is 02:00:0a:01:00:05.
* Interface names: the GPU side of a NIC cable is ``gpu<i>-p<port>``; a
  switch port is ``<switch>-eth<openflow port>`` (Mininet's convention).

Hosts route by destination plane: traffic to 10.2/16 leaves on port 1 and
traffic to 10.1/16 leaves on port 2. The port-selection policy therefore only
has to pick which of the destination's two addresses to send to.
"""

from __future__ import annotations

import functools
import ipaddress

from common.errors import TestbedError

MAX_GPUS = 65535
PREFIX_LEN = 16


def _check(gpu: int, port: int) -> None:
    if not isinstance(gpu, int) or not 1 <= gpu <= MAX_GPUS:
        raise TestbedError(f"GPU number {gpu!r} is out of range: expected 1..{MAX_GPUS}")
    if port not in (1, 2):
        raise TestbedError(f"NIC port {port!r} does not exist: expected 1 or 2")


def ip_of(gpu: int, port: int) -> str:
    """IPv4 address (no prefix) of a GPU's NIC port."""
    _check(gpu, port)
    return f"10.{port}.{gpu // 256}.{gpu % 256}"


def alt_ips(src_gpu: int, src_port: int, dst_gpu: int, dst_port: int) -> dict[str, str]:
    """The other NIC port pair of a transfer (p1 -> dst p2 becomes p2 -> dst p1) as a plan line's
    ``alt_src_ip``/``alt_dst_ip``: where its agent resends it when the planned pair's connection dies."""
    return {"alt_src_ip": ip_of(src_gpu, 3 - src_port), "alt_dst_ip": ip_of(dst_gpu, 3 - dst_port)}


def mac_of(gpu: int, port: int) -> str:
    """MAC address of a GPU's NIC port."""
    _check(gpu, port)
    return f"02:00:0a:{port:02x}:{gpu >> 8:02x}:{gpu & 0xFF:02x}"


@functools.lru_cache(maxsize=1 << 17)  # room for every NIC port of MAX_GPUS
def parse_ip(address: str) -> tuple[int, int]:
    """(GPU, port) for an address of the plan; TestbedError for any other. Remembered: a write-up parses the
    two addresses of each of millions of messages (n = 2,048: 0.6M messages, 8.5 s of ipaddress)."""
    try:
        packed = ipaddress.IPv4Address(address).packed
    except ValueError:
        raise TestbedError(f"{address!r} is not an IPv4 address") from None
    first, port, high, low = packed
    gpu = high * 256 + low
    if first != 10 or port not in (1, 2) or gpu < 1:
        raise TestbedError(
            f"{address!r} is not a GPU port address: expected 10.<1|2>.<gpu//256>.<gpu%256>"
        )
    return gpu, port


def host_name(gpu: int) -> str:
    return f"gpu{gpu}"


def host_intf(gpu: int, port: int) -> str:
    """Name of the GPU-side interface of NIC port ``port``."""
    _check(gpu, port)
    return f"gpu{gpu}-p{port}"


def switch_intf(switch: str, of_port: int) -> str:
    """Name of switch port ``of_port`` (Mininet style, at most 15 characters)."""
    return f"{switch}-eth{of_port}"


def endpoint_name(gpu: int, port: int) -> str:
    """The endpoint string used in plan JSON: ``gpu<i>:p<port>``."""
    _check(gpu, port)
    return f"gpu{gpu}:p{port}"
