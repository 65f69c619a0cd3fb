"""Files around the traffic agent: per-agent plans in, one row per transfer out.

``write_plans`` splits a transfer list by source into ``<src>.plan.jsonl``
(what ``python -m traffic.runtime.agent --plan`` reads); a transfer may name the
other NIC port pair (``alt_src_ip``, ``alt_dst_ip``), where the agent resends
it when its own pair's connection dies. After a run,
``merge_results`` joins every plan line with the sender's record
(``<src>.sent.jsonl``) and the receiver's (``<dst>.recv.jsonl``) by transfer
id, so a transfer that never completed still shows up, as a failed row.
Merged times are seconds after t0 (the agents record absolute
CLOCK_MONOTONIC); ``end`` is the receiver's last byte, ``sender_end`` the ack
as seen by the sender. A row whose sender resent it after a dead connection or
sent it over the other port pair also carries the sender's ``RETRY_KEYS``.
"""

from __future__ import annotations

import csv
import glob
import json
import math
import re
from pathlib import Path
from typing import Any, Iterable, Sequence

from traffic.model.errors import TrafficError

PLAN_KEYS = ("id", "src", "src_ip", "dst_ip", "dst_port", "bytes", "start")
ALT_PLAN_KEYS = ("alt_src_ip", "alt_dst_ip")  # optional, both or neither: the other NIC port pair, for a retry
COLUMNS = ("id", "request_id", "src", "dst", "src_ip", "dst_ip", "bytes", "received_bytes",
           "scheduled_start", "start", "first_byte", "end", "sender_end", "verified", "error")
NEVER_COMPLETED = "never completed"
RETRY_KEYS = ("retried", "moved", "first_error", "sent_src_ip", "sent_dst_ip")  # see traffic.runtime.agent
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def plan_path(out_dir: str | Path, name: str) -> Path:
    """Where ``write_plans`` puts agent ``name``'s plan."""
    return Path(out_dir) / f"{name}.plan.jsonl"


def write_plans(transfers: Iterable[dict[str, Any]], out_dir: str | Path,
                agents: Iterable[str] = ()) -> dict[str, Path]:
    """Write one plan per source agent (sorted by start) and return {name: path}.

    ``agents`` names agents that get a plan even with nothing to send (every
    agent needs a --plan). Ids must be unique across all plans, since the
    receivers know transfers only by id.
    """
    by_src: dict[str, list[dict[str, Any]]] = {name: [] for name in agents}
    seen: set[int] = set()
    for t in transfers:
        missing = [k for k in PLAN_KEYS if k not in t]
        if missing:
            raise TrafficError(f"transfer {t!r} lacks {', '.join(missing)}; expected keys {', '.join(PLAN_KEYS)}")
        if sum(t.get(k) is not None for k in ALT_PLAN_KEYS) == 1:
            raise TrafficError(f"transfer {t['id']!r} names one of alt_src_ip, alt_dst_ip; expected both or neither")
        if t["id"] in seen:
            raise TrafficError(f"transfer id {t['id']!r} appears twice; expected unique ids")
        seen.add(t["id"])
        by_src.setdefault(t["src"], []).append(t)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for name, items in by_src.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise TrafficError(f"agent name {name!r} is not allowed; expected letters, digits, '_', '.', '-'")
        items.sort(key=lambda t: (t["start"], t["id"]))
        path = plan_path(out_dir, name)
        path.write_text("".join(json.dumps(t, separators=(",", ":")) + "\n" for t in items), encoding="utf-8")
        paths[name] = path
    return paths


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Records of a JSON-lines file; a cut-off last line (agent killed mid-write) is skipped."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines):
                break
            raise TrafficError(f"{path}:{number}: not JSON; expected one record a line") from None
    return records


def _read_all(out_dir: Path, suffix: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for path in sorted(glob.glob(str(out_dir / f"*{suffix}"))):
        records.extend(read_jsonl(path))
    return records


def _since(value: float | None, t0: float | None) -> float | None:
    return None if value is None or t0 is None else value - t0


def _pick_recv(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Of several receiver records for one id, the verified one, else the last."""
    return next((r for r in records if r.get("verified")), records[-1])


def merge_results(out_dir: str | Path, t0: float | None = None) -> list[dict[str, Any]]:
    """One row per planned transfer (plus any received id no plan knows), by scheduled start.

    ``t0`` defaults to the one implied by the sender records (scheduled_start
    minus plan start). ``verified`` needs both the receiver's check and the
    sender's ack; ``error`` is the sender's, else the receiver's, else
    "never completed" if either side has no record.
    """
    out = Path(out_dir)
    plan = {t["id"]: t for t in _read_all(out, ".plan.jsonl")}
    sent = {s["id"]: s for s in _read_all(out, ".sent.jsonl")}
    recv: dict[int, list[dict[str, Any]]] = {}
    for r in _read_all(out, ".recv.jsonl"):
        if r.get("id") is not None:
            recv.setdefault(r["id"], []).append(r)
    if t0 is None:
        t0 = next((s["scheduled_start"] - plan[i]["start"] for i, s in sent.items() if i in plan), None)
    rows = []
    for tid in list(plan) + [i for i in recv if i not in plan]:
        p, s = plan.get(tid), sent.get(tid)
        r = _pick_recv(recv[tid]) if tid in recv else None
        base = p or s or {}
        error = (s or {}).get("error") or (r or {}).get("error")
        if p is None:
            error = error or "not in any plan"
        elif s is None or r is None:
            error = error or NEVER_COMPLETED
        rows.append({
            "id": tid, "request_id": base.get("request_id"), "src": base.get("src"), "dst": base.get("dst"),
            "src_ip": base.get("src_ip"), "dst_ip": base.get("dst_ip"), "bytes": base.get("bytes"),
            "received_bytes": r["bytes"] if r else None,
            "scheduled_start": p["start"] if p else None,
            "start": _since(s.get("start") if s else None, t0),
            "first_byte": _since(r["first_byte"] if r else None, t0),
            "end": _since(r["last_byte"] if r else None, t0),
            "sender_end": _since(s.get("end") if s else None, t0),
            "verified": bool(r and r.get("verified") and s and s.get("ok")) and error is None,
            "error": error,
        })
        for key in ("kind", "engine", "step"):  # the live driver's orders name what a message is
            if key in base:
                rows[-1][key] = base[key]
        if s and (s.get("retried") or s.get("moved")):  # only then: other rows keep exactly COLUMNS
            rows[-1].update((key, s.get(key)) for key in RETRY_KEYS)
    rows.sort(key=lambda row: (math.inf if row["scheduled_start"] is None else row["scheduled_start"], row["id"]))
    return rows


def sent_pair(row: dict[str, Any]) -> tuple[Any, Any]:
    """(source, destination address) the row's bytes went over: the port pair its sender last used when it
    moved the transfer, else the planned one."""
    return row.get("sent_src_ip") or row.get("src_ip"), row.get("sent_dst_ip") or row.get("dst_ip")


def retry_counts(rows: Iterable[dict[str, Any]]) -> tuple[int, int]:
    """(rows the sender retried after a dead connection, rows it sent over the other port pair)."""
    retried = moved = 0
    for row in rows:
        retried += bool(row.get("retried"))
        moved += bool(row.get("moved"))
    return retried, moved


def start_lateness(rows: Sequence[dict[str, Any]]) -> list[float]:
    """Actual minus scheduled start (s) of every merged row the sender started."""
    return [row["start"] - row["scheduled_start"] for row in rows
            if row["start"] is not None and row["scheduled_start"] is not None]


def write_transfers_csv(rows: Iterable[dict[str, Any]], path: str | Path, extra: Sequence[str] = ()) -> int:
    """Write merged rows as CSV (``COLUMNS`` + ``extra``, empty cell for None); return the row count. When a
    sender retried or moved some row, ``RETRY_KEYS`` follow as columns too (else the file is as it was)."""
    rows = list(rows)
    count = 0
    columns = COLUMNS + tuple(extra)
    if any(r.get("retried") or r.get("moved") for r in rows):
        columns += RETRY_KEYS
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for row in rows:
            writer.writerow(["" if row.get(c) is None else row[c] for c in columns])
            count += 1
    return count


__all__ = ["PLAN_KEYS", "ALT_PLAN_KEYS", "COLUMNS", "NEVER_COMPLETED", "plan_path", "write_plans", "read_jsonl",
           "merge_results", "retry_counts", "sent_pair", "start_lateness", "write_transfers_csv", "RETRY_KEYS"]
