"""Read public LLM-inference request traces into ``Request`` lists.

Two formats (see data/traces/README.md), plain or gzip-compressed (recognised
by the gzip magic bytes, whatever the file is called; the shipped traces are
``.gz``):

* Mooncake JSONL: one object a line with ``timestamp`` (ms from trace start,
  integer), ``input_length``, ``output_length`` (tokens) and ``hash_ids``
  (list of non-negative ints, ids of 512-token prefix blocks). All four keys
  are required.
* Azure CSV: header ``TIMESTAMP,ContextTokens,GeneratedTokens``; TIMESTAMP is
  wall-clock ``YYYY-MM-DD HH:MM:SS[.fraction]`` (the 2023 trace has 7
  fractional digits, 100 ns). Arrival times become seconds from the first
  accepted row, computed in integer nanoseconds so no digits are lost.

Rules for both: ``input`` tokens must be an integer >= 1 (no prompt means no KV
to move), ``output`` tokens an integer >= 0, timestamps >= 0 and
non-decreasing. Blank lines are ignored. ``request_id`` is the 0-based index of
the data row in the file (header and blank lines not counted), so ids stay the
same whether or not bad rows are skipped.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import re
import zlib
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator, Sequence

from traffic.model._check import int_at_least, one_of, real_at_least, real_positive
from traffic.model.errors import TraceError, TrafficError

FORMATS = ("auto", "mooncake", "azure")
AZURE_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
_UNKNOWN_FIRST_LINE = "its first line is neither a JSON object nor the Azure CSV header"
_EXPECT_FORMAT = ("expected Mooncake JSONL (one JSON object a line) or Azure CSV "
                  "with header 'TIMESTAMP,ContextTokens,GeneratedTokens'")
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_TS_RE = re.compile(r"^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?$")
_EPOCH = datetime(1970, 1, 1)


ROW_FIELDS = ("request_id", "arrival_s", "input_tokens", "output_tokens", "hash_ids", "session", "turn")


@dataclass(frozen=True, slots=True)
class Request:
    """One inference request: when it arrives and how many tokens it has.

    ``hash_ids``: ids of its 512-token prefix blocks (Mooncake's ``hash_ids``; the same id in two requests is
    the same reusable block). ``session`` / ``turn``: a multi-turn (agentic) session it is turn ``turn`` (0
    first) of; a closed loop runs a session's turns one after the other (``traffic.model.serving``). None: a
    request of its own.
    """

    request_id: int
    arrival_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    session: int | None = None
    turn: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.hash_ids, tuple):  # a JSON row's list
            object.__setattr__(self, "hash_ids", tuple(self.hash_ids))

    def to_row(self) -> list:
        """The JSON row form: [request_id, arrival_s, input_tokens, output_tokens], and [hash_ids, session,
        turn] after them only when it has hash ids or a session (so plain requests stay four numbers, as the
        configs always wrote them). ``from_row`` reads it back."""
        row = [self.request_id, self.arrival_s, self.input_tokens, self.output_tokens]
        if self.hash_ids or self.session is not None:
            row += [list(self.hash_ids), self.session, self.turn]
        return row

    @classmethod
    def from_row(cls, row) -> Request:
        """A request from its JSON row: a list of 4 to 7 values in ``ROW_FIELDS`` order (``to_row``), or an
        object with those keys (the first four required)."""
        if isinstance(row, dict):
            unknown = sorted(set(row) - set(ROW_FIELDS))
            if unknown or any(k not in row for k in ROW_FIELDS[:4]):
                raise TrafficError(f"request row keys {sorted(row)} are not allowed; expected "
                                   f"{', '.join(ROW_FIELDS[:4])} and optionally {', '.join(ROW_FIELDS[4:])}")
            return cls(**row)
        if not isinstance(row, (list, tuple)) or not 4 <= len(row) <= len(ROW_FIELDS):
            raise TrafficError(f"request row {row!r} is not allowed; expected a list of 4 to {len(ROW_FIELDS)} "
                               f"values ({', '.join(ROW_FIELDS)})")
        return cls(*row)


@dataclass(frozen=True)
class TraceReadResult:
    """What ``read_trace`` found: the requests, how many rows it skipped, the format."""

    requests: list[Request]
    skipped: int
    fmt: str


class _RowError(Exception):
    """A bad row; carries the field and the reason for the one-line message. The reason describes the value
    (its kind, the bound it misses), never quotes it: the file may be anything root can read, and a
    message must not show a piece of it."""

    def __init__(self, field: str | None, why: str, expected: str) -> None:
        super().__init__(why)
        self.field, self.why, self.expected = field, why, expected


def _open_text(path: Path):
    """The trace as text: gzip-compressed (by content, not name) or plain UTF-8."""
    try:
        with path.open("rb") as raw:
            magic = raw.read(4)
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace ({exc.strerror or exc}); expected a readable "
                         "Mooncake JSONL or Azure CSV file (plain or .gz)") from None
    if magic == _ZSTD_MAGIC:
        raise TraceError(f"{path}: zstd-compressed traces are not read; expected plain or gzip-compressed "
                         "text (zstd -dc FILE | gzip -9 -n > FILE.gz)")
    if magic.startswith(_GZIP_MAGIC):
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
    return path.open("r", encoding="utf-8-sig", newline="")


def _data_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, text) for non-blank lines."""
    number = 0
    try:
        with _open_text(path) as handle:
            for number, line in enumerate(handle, start=1):
                text = line.strip()
                if text:
                    yield number, text
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise TraceError(f"{path}:{number + 1}: corrupt or truncated gzip data ({exc}); expected a whole "
                         ".gz file (gzip -t FILE checks it)") from None
    except OSError as exc:
        raise TraceError(f"{path}:{number + 1}: cannot read the trace ({exc.strerror or exc}); expected a "
                         "readable file") from None


def detect_format(path: str | Path) -> str:
    """Return "mooncake" or "azure" from the first non-blank line's content."""
    path = Path(path)
    first = _first_line(path)
    kind = _classify(first[1])
    if kind is None:
        raise TraceError(f"{path}:{first[0]}: cannot detect trace format: {_UNKNOWN_FIRST_LINE}; {_EXPECT_FORMAT}")
    return kind


def _first_line(path: Path) -> tuple[int, str]:
    if path.is_dir():
        raise TraceError(f"{path}: is a directory, not a trace file; expected a Mooncake .jsonl "
                         "or Azure .csv file (plain or .gz)")
    if not path.is_file():
        raise TraceError(f"{path}: trace file not found; expected a readable Mooncake .jsonl "
                         "or Azure .csv file (plain or .gz)")
    try:
        for item in _data_lines(path):
            return item
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text ({exc.reason}); {_EXPECT_FORMAT}") from None
    raise TraceError(f"{path}: trace file is empty; {_EXPECT_FORMAT}")


def _classify(line: str) -> str | None:
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            return None
        return "mooncake" if isinstance(obj, dict) else None
    cells = tuple(cell.strip() for cell in line.split(","))
    return "azure" if cells == AZURE_HEADER else None


def read_trace(path: str | Path, fmt: str = "auto", skip_bad: bool = False) -> TraceReadResult:
    """Read a trace; raise ``TraceError`` on the first bad row unless ``skip_bad``.

    With ``skip_bad`` bad rows are dropped and counted in ``skipped``; a missing
    or empty file, an undetectable or mismatched format, and a file with no
    valid row still raise.
    """
    path = Path(path)
    one_of("trace format", fmt, FORMATS)
    line_no, line = _first_line(path)
    found = _classify(line)
    if found is None:
        raise TraceError(f"{path}:{line_no}: cannot detect trace format: {_UNKNOWN_FIRST_LINE}; {_EXPECT_FORMAT}")
    if fmt != "auto" and fmt != found:
        raise TraceError(f"{path}:{line_no}: format {fmt!r} was asked for but the file looks "
                         f"like {found!r}; expected a {fmt} trace or fmt='auto'")
    parse = _parse_mooncake_row if found == "mooncake" else _parse_azure_row
    rows = _data_lines(path)
    if found == "azure":
        next(rows)  # header, already checked by _classify
    try:
        requests, skipped = _read_rows(path, found, rows, parse, skip_bad)
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text ({exc.reason}); {_EXPECT_FORMAT}") from None
    if not requests:
        raise TraceError(f"{path}: no valid request rows ({skipped} skipped); expected at least one")
    return TraceReadResult(requests, skipped, found)


def _read_rows(path: Path, found: str, rows: Iterator[tuple[int, str]], parse: Any,
               skip_bad: bool) -> tuple[list[Request], int]:
    requests: list[Request] = []
    skipped = 0
    first_ns: int | None = None
    prev_ns: int | None = None
    for row_index, (number, text) in enumerate(rows):
        try:
            stamp_ns, n_in, n_out, hashes = parse(text)
            if prev_ns is not None and stamp_ns < prev_ns:
                raise _RowError(_ts_field(found), "goes backwards (earlier than the row before)",
                                "non-decreasing timestamps")
        except _RowError as err:
            if skip_bad:
                skipped += 1
                continue
            where = f"field {err.field!r}" if err.field else "row"
            raise TraceError(f"{path}:{number}: {where}: {err.why}; expected {err.expected}") from None
        if first_ns is None:
            first_ns = stamp_ns if found == "azure" else 0
        prev_ns = stamp_ns
        requests.append(Request(row_index, (stamp_ns - first_ns) / 1e9, n_in, n_out, hashes))
    return requests, skipped


def _ts_field(fmt: str) -> str:
    return "timestamp" if fmt == "mooncake" else "TIMESTAMP"


def _kind(value: Any) -> str:
    """What a value is, without showing it."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a fraction" if isinstance(value, float) and math.isfinite(value) else \
            "a number" if isinstance(value, int) else "not a finite number"
    return {str: "a text", list: "a list", dict: "an object", type(None): "null"}.get(type(value), "a value")


def _token_count(field: str, value: Any, minimum: int) -> int:
    """Accept ints (or integral floats in JSON, digit strings in CSV) >= minimum."""
    number: Any = value
    if isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            raise _RowError(field, "is a text that is not an integer",
                            f"an integer token count >= {minimum}") from None
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    if isinstance(number, bool) or not isinstance(number, int):
        raise _RowError(field, f"is {_kind(value)}, not an integer", f"an integer token count >= {minimum}")
    if number < minimum:
        raise _RowError(field, f"is below {minimum}", f"an integer token count >= {minimum}")
    return number


def _parse_mooncake_row(text: str) -> tuple[int, int, int, tuple[int, ...]]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _RowError(None, f"invalid JSON ({exc.msg})", "one JSON object per line") from None
    if not isinstance(obj, dict):
        raise _RowError(None, f"a JSON {type(obj).__name__}, not an object",
                        "one JSON object per line")
    for key in MOONCAKE_KEYS:
        if key not in obj:
            raise _RowError(key, "missing", f"keys {', '.join(MOONCAKE_KEYS)}")
    stamp = obj["timestamp"]
    if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or not math.isfinite(stamp):
        raise _RowError("timestamp", f"is {_kind(stamp)}, not a number", "milliseconds >= 0")
    if stamp < 0:
        raise _RowError("timestamp", "is negative", "milliseconds >= 0")
    hashes = obj["hash_ids"]
    if not isinstance(hashes, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in hashes):
        raise _RowError("hash_ids", f"is {_kind(hashes)}, not a list of non-negative integers"
                        if not isinstance(hashes, list) else "holds something that is not a non-negative integer",
                        "a list of non-negative integers")
    return (round(stamp * 1_000_000), _token_count("input_length", obj["input_length"], 1),
            _token_count("output_length", obj["output_length"], 0), tuple(hashes))


def _parse_azure_row(text: str) -> tuple[int, int, int, tuple[int, ...]]:
    cells = next(csv.reader([text]))
    if len(cells) != 3:
        raise _RowError(None, f"{len(cells)} fields", "3 fields TIMESTAMP,ContextTokens,GeneratedTokens")
    stamp = cells[0].strip()
    match = _TS_RE.match(stamp)
    try:
        if match is None:
            raise ValueError
        whole = datetime.strptime(f"{match[1]} {match[2]}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        raise _RowError("TIMESTAMP", "is not a timestamp",
                        "'YYYY-MM-DD HH:MM:SS[.fraction]'") from None
    fraction = match[3] or ""
    seconds = (whole - _EPOCH).days * 86400 + (whole - _EPOCH).seconds
    ns = seconds * 1_000_000_000 + (int(fraction.ljust(9, "0")) if fraction else 0)
    return (ns, _token_count("ContextTokens", cells[1], 1),
            _token_count("GeneratedTokens", cells[2], 0), ())


def slice_requests(requests: Sequence[Request], start_s: float | None = None,
                   end_s: float | None = None, first_n: int | None = None,
                   speed: float = 1.0) -> list[Request]:
    """Take a time window and/or the first N requests, optionally sped up.

    Keeps requests with ``start_s <= arrival_s < end_s`` (original trace time),
    then the first ``first_n`` of those. New arrival = (arrival - base) / speed
    where base is ``start_s`` if given, else the first kept request's arrival,
    so the window starts at 0. ``speed`` 2.0 replays twice as fast. Request ids
    are kept so results map back to trace rows.
    """
    if start_s is not None:
        real_at_least("start_s", start_s, 0.0)
    if end_s is not None:
        real_at_least("end_s", end_s, 0.0)
        if start_s is not None and end_s <= start_s:
            raise TrafficError(f"end_s {end_s!r} is not after start_s {start_s!r}; "
                               "expected end_s > start_s")
    if first_n is not None:
        int_at_least("first_n", first_n, 1)
    speed = real_positive("speed", speed)
    kept = [r for r in requests
            if (start_s is None or r.arrival_s >= start_s) and (end_s is None or r.arrival_s < end_s)]
    if first_n is not None:
        kept = kept[:first_n]
    if not kept:
        return []
    base = start_s if start_s is not None else kept[0].arrival_s
    return [replace(r, arrival_s=(r.arrival_s - base) / speed) for r in kept]


def served_requests(requests: Sequence[Request], start_s: float, duration_s: float, first_n: int | None,
                    speed: float, closed: bool, label: str = "the trace") -> list[Request]:
    """The requests a run serves, the one rule every driver and the run's own count use.

    Closed loop (the trace gives request sizes only): every request arriving at or after ``start_s``, in
    order, the first ``first_n`` of them; the loop draws them in turn. Otherwise the window
    ``start_s <= arrival < start_s + duration_s``, the first ``first_n``, sped up by ``speed``
    (``slice_requests``). An empty result is a TrafficError naming the window and ``label``."""
    if closed:
        kept = [r for r in requests if r.arrival_s >= start_s][:first_n]
        if not kept:
            raise TrafficError(f"{label}: no request arrives at or after {start_s:g} s; expected a start_s before "
                               "its last request")
        return kept
    kept = slice_requests(requests, start_s=start_s, end_s=start_s + duration_s, first_n=first_n, speed=speed)
    if not kept:
        raise TrafficError(f"{label}: the window {start_s:g} .. {start_s + duration_s:g} s holds no request; "
                           "expected a window over the trace's arrivals")
    return kept


__all__ = ["Request", "TraceReadResult", "read_trace", "detect_format", "slice_requests", "served_requests",
           "FORMATS", "AZURE_HEADER", "MOONCAKE_KEYS", "ROW_FIELDS"]
