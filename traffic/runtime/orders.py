"""What an agent is told to send: plan lines (``--plan``) and the coordinator's orders (``--control``), each
checked into a ``PlannedTransfer``; and the addresses it listens on. Standard library only."""

from __future__ import annotations

import argparse
import json
import math
import socket
from dataclasses import dataclass
from typing import Any

from traffic.runtime.wire import MAX_U64

ALT_KEYS = ("alt_src_ip", "alt_dst_ip")  # optional in plan lines and orders: the other NIC port pair


class AgentError(Exception):
    """Bad arguments or plan; printed as one line, exit status 2."""


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


def order_transfer(order: dict[str, Any], name: str, clock_offset: float = 0.0) -> PlannedTransfer:
    """A coordinator's ``send`` order as a transfer due at ``due`` (the coordinator's clock; moved onto this
    host's by ``clock_offset``, this clock minus that one); AgentError on a bad alternative pair (the rest is
    the coordinator's own bookkeeping and trusted as before)."""
    alt_src_ip, alt_dst_ip = _want_alt(f"order {order.get('id')!r}", order)
    return PlannedTransfer(order["id"], order.get("request_id"), name, order.get("dst"), order["src_ip"],
                           order["dst_ip"], order["dst_port"], order["bytes"], order["due"] + clock_offset, alt_src_ip,
                           alt_dst_ip)


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
