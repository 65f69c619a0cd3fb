"""Flow-completion statistics in the style of HPCC's fct_analysis.

Percentiles use the NEAREST-RANK method: the p-th percentile of n sorted
values is the ceil(p/100 x n)-th smallest (1-based; p = 0 gives the minimum),
so it is always an observed value and p999 of fewer than 1000 samples is the
maximum. It is the project's one percentile definition: FCT, slowdown, TTFT,
start lateness and PFC pause/resume latency all use it (README, "Metrics").
Size bins are equal-COUNT quantile bins over transfer size, as
fct_analysis does: sort transfers by size (stable) and cut the sorted list
into ``n_bins`` groups, group k holding positions [k*n//n_bins,
(k+1)*n//n_bins). Equal sizes may straddle two bins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from traffic.model._check import int_at_least, real_at_least, real_positive
from traffic.model.errors import TrafficError

DEFAULT_PERCENTILES: dict[str, float] = {"p50": 50.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}


def _array(name: str, values: Iterable[float]) -> np.ndarray:
    arr = np.asarray(list(values), dtype=float)
    if arr.size == 0:
        raise TrafficError(f"{name} is empty; expected at least one value")
    if not np.isfinite(arr).all():
        raise TrafficError(f"{name} holds a non-finite value; expected finite numbers")
    return arr


def _nearest_rank(ordered: np.ndarray, p: float) -> float:
    """The ceil(p/100 x n)-th smallest of ``ordered`` (sorted), the minimum for p = 0."""
    real_at_least("percentile", p, 0.0)
    if p > 100:
        raise TrafficError(f"percentile {p!r} is not allowed; expected 0..100")
    rank = max(1, math.ceil(round(p / 100.0 * len(ordered), 9)))  # round: 99.9% of 1000 is 999, not 999.0000001
    return float(ordered[rank - 1])


def nearest_rank_index(n: int, p: float) -> int:
    """The 0-based position of the nearest-rank p-th percentile in ``n`` sorted values."""
    int_at_least("number of values", n, 1)
    real_at_least("percentile", p, 0.0)
    if p > 100:
        raise TrafficError(f"percentile {p!r} is not allowed; expected 0..100")
    return max(1, math.ceil(round(p / 100.0 * n, 9))) - 1


def percentile(values: Iterable[float], p: float) -> float:
    """Nearest-rank p-th percentile (0 <= p <= 100): the one definition every metric uses."""
    return _nearest_rank(np.sort(_array("values", values)), p)


def percentiles(values: Iterable[float],
                which: dict[str, float] | None = None) -> dict[str, float]:
    """Named nearest-rank percentiles, by default p50, p95, p99, p999."""
    ordered = np.sort(_array("values", values))  # once for all the names
    return {name: _nearest_rank(ordered, p) for name, p in (which or DEFAULT_PERCENTILES).items()}


def rounded_percentiles(values: Iterable[float], keys: Sequence[str] = ("p50", "p99"),
                        factor: float = 1.0, digits: int = 3) -> dict[str, float | None]:
    """Named nearest-rank percentiles x ``factor``, rounded; all None when nothing was measured.

    ``keys`` are names from ``DEFAULT_PERCENTILES`` (p50, p95, p99, p999). Reports and summaries
    use this: an empty measurement is a gap to show, not an error.
    """
    vals = list(values)
    if not vals:
        return {k: None for k in keys}
    got = percentiles(vals, {k: DEFAULT_PERCENTILES[k] for k in keys})
    return {k: round(got[k] * factor, digits) for k in keys}


def summary(values: Iterable[float]) -> dict[str, float]:
    """count, mean, min, max and the default percentiles of ``values``."""
    arr = _array("values", values)
    return {"count": int(arr.size), "mean": float(arr.mean()), "min": float(arr.min()),
            "max": float(arr.max()), **percentiles(arr)}


def ideal_fct_s(nbytes: int, link_bps: float, overhead_s: float = 0.0,
                mtu_payload: int = 1448, header_bytes: int = 0) -> float:
    """Standalone FCT: overhead + wire bits / link rate, with header_bytes per packet."""
    int_at_least("transfer bytes", nbytes, 0)
    rate = real_positive("link_bps", link_bps)
    real_at_least("overhead_s", overhead_s, 0.0)
    int_at_least("mtu_payload", mtu_payload, 1)
    int_at_least("header_bytes", header_bytes, 0)
    wire = nbytes + math.ceil(nbytes / mtu_payload) * header_bytes
    return overhead_s + wire * 8 / rate


def fct_slowdown(measured_fct_s: float, nbytes: int, link_bps: float, overhead_s: float = 0.0,
                 mtu_payload: int = 1448, header_bytes: int = 0) -> float:
    """Measured FCT / ideal standalone FCT (not clamped; < 1 means the ideal is pessimistic)."""
    real_at_least("measured FCT", measured_fct_s, 0.0)
    ideal = ideal_fct_s(nbytes, link_bps, overhead_s, mtu_payload, header_bytes)
    if ideal <= 0:
        raise TrafficError(f"ideal FCT of {nbytes} bytes is 0; expected bytes > 0 or overhead_s > 0")
    return measured_fct_s / ideal


def fct_slowdowns(measured_fct_s: Sequence[float], nbytes: Sequence[int], link_bps: float, overhead_s: float = 0.0,
                  mtu_payload: int = 1448, header_bytes: int = 0) -> list[float]:
    """``fct_slowdown`` of every (measured FCT, bytes) pair, as one array computation (a write-up has ~100k): the
    same operations in the same order, so the same floats; a bad pair raises what ``fct_slowdown`` raises."""
    fct = np.asarray(measured_fct_s, dtype=np.float64)
    size = np.asarray(nbytes)
    if fct.shape != size.shape or fct.ndim != 1:
        raise TrafficError(f"{fct.size} FCTs but {size.size} sizes; expected two equal-length lists")
    if not fct.size:
        return []
    if size.dtype.kind != "i" or not (np.isfinite(fct) & (fct >= 0) & (size >= 0)).all():
        # something bad (or sizes not all integers): one by one, so the first bad pair raises as it would alone
        return [fct_slowdown(f, b, link_bps, overhead_s, mtu_payload, header_bytes)
                for f, b in zip(measured_fct_s, nbytes)]
    rate = real_positive("link_bps", link_bps)
    real_at_least("overhead_s", overhead_s, 0.0)
    int_at_least("mtu_payload", mtu_payload, 1)
    int_at_least("header_bytes", header_bytes, 0)
    wire = size + np.ceil(size / mtu_payload).astype(np.int64) * header_bytes
    ideal = overhead_s + wire * 8 / rate
    if (ideal <= 0).any():
        i = int(np.argmax(ideal <= 0))
        raise TrafficError(f"ideal FCT of {int(size[i])} bytes is 0; expected bytes > 0 or overhead_s > 0")
    return (fct / ideal).tolist()


@dataclass(frozen=True)
class SizeBin:
    """One equal-count size bin: its size range, its members (indices into the input)."""

    index: int
    min_bytes: int
    max_bytes: int
    members: tuple[int, ...]

    @property
    def count(self) -> int:
        """Number of transfers in the bin."""
        return len(self.members)


def size_bins(sizes: Sequence[int], n_bins: int = 10) -> list[SizeBin]:
    """Equal-count quantile bins over sizes (fewer bins if there are fewer transfers)."""
    int_at_least("n_bins", n_bins, 1)
    arr = _array("sizes", sizes)
    order = np.argsort(arr, kind="stable")
    n = arr.size
    bins = []
    for k in range(min(n_bins, n)):
        members = order[k * n // min(n_bins, n):(k + 1) * n // min(n_bins, n)]
        bins.append(SizeBin(k, int(arr[members[0]]), int(arr[members[-1]]),
                            tuple(int(i) for i in members)))
    return bins


def binned_slowdowns(sizes: Sequence[int], slowdowns: Sequence[float],
                     n_bins: int = 10) -> list[dict[str, float]]:
    """Per size bin: size range, count and p50/p95/p99 slowdown (one dict per bin)."""
    slow = _array("slowdowns", slowdowns)
    if len(sizes) != slow.size:
        raise TrafficError(f"{len(sizes)} sizes but {slow.size} slowdowns; expected equal lengths")
    rows = []
    for b in size_bins(sizes, n_bins):
        vals = slow[list(b.members)]
        rows.append({"bin": b.index, "min_bytes": b.min_bytes, "max_bytes": b.max_bytes,
                     "count": b.count, "p50": percentile(vals, 50), "p95": percentile(vals, 95),
                     "p99": percentile(vals, 99)})
    return rows


@dataclass(frozen=True, slots=True)
class FctRecord:
    """One finished transfer: GPUs, bytes and times in integer nanoseconds."""

    src: int
    dst: int
    bytes: int
    start_ns: int
    fct_ns: int
    standalone_ns: int


FCT_COLUMNS = ("src", "dst", "bytes", "start_ns", "fct_ns", "standalone_ns")


def write_fct_txt(path: str | Path, records: Iterable[FctRecord]) -> int:
    """Write an fct.txt-style file and return the number of lines.

    One line per transfer, no header, six space-separated integers:
    ``src dst bytes start_ns fct_ns standalone_ns`` = source GPU, destination
    GPU, emulated bytes, start time (ns from schedule start), measured flow
    completion time (ns) and ideal standalone FCT (ns). Like HPCC's fct.txt
    but with GPU numbers in place of IPs and ports.
    """
    lines = []
    for r in records:
        values = (r.src, r.dst, r.bytes, r.start_ns, r.fct_ns, r.standalone_ns)
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in values):
            raise TrafficError(f"fct record {r} has a non-integer or negative field; "
                               f"expected integers >= 0 for {' '.join(FCT_COLUMNS)}")
        lines.append(" ".join(str(v) for v in values) + "\n")
    Path(path).write_text("".join(lines), encoding="ascii")
    return len(lines)


def read_fct_txt(path: str | Path) -> list[FctRecord]:
    """Read a file written by ``write_fct_txt``."""
    records = []
    for number, line in enumerate(Path(path).read_text(encoding="ascii").splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            values = [int(p) for p in parts]
        except ValueError:
            values = []
        if len(values) != len(FCT_COLUMNS):
            raise TrafficError(f"{path}:{number}: {line[:40]!r} is not an fct line; expected "
                               f"{len(FCT_COLUMNS)} integers {' '.join(FCT_COLUMNS)}")
        records.append(FctRecord(*values))
    return records


__all__ = ["nearest_rank_index", "percentile",
           "percentiles", "rounded_percentiles", "summary", "ideal_fct_s", "fct_slowdown", "fct_slowdowns", "SizeBin",
           "size_bins", "binned_slowdowns", "FctRecord", "FCT_COLUMNS", "write_fct_txt",
           "read_fct_txt", "DEFAULT_PERCENTILES"]
