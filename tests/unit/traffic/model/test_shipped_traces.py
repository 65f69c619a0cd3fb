"""The traces in data/traces/ are the unmodified public files its README describes.

The README's table is the reference: each shipped .gz must hash (uncompressed
and compressed) to what the table says and read to the table's row count, and
every .gz in the folder must be in the table. Changing a file or the table
alone fails here. Nothing is skipped: the files are part of the repository.
"""

from __future__ import annotations

import gzip
import hashlib
import re

import pytest

from common.paths import DEFAULT_TRACE, TRACES_DIR
from traffic.model.traces import read_trace

README = TRACES_DIR / "README.md"
COLUMNS = ("file", "original", "rows", "sha256 (original, uncompressed)", "sha256 (.gz)")


def readme_table() -> dict[str, dict[str, str]]:
    """file name -> its row of the README's table (header checked, so a renamed column fails too)."""
    lines = README.read_text(encoding="utf-8").splitlines()
    rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines if ln.startswith("|")]
    head = next((i for i, r in enumerate(rows) if tuple(r) == COLUMNS), None)
    assert head is not None, f"{README}: no table with the columns {' | '.join(COLUMNS)}"
    table = {}
    for r in rows[head + 2:]:  # after the header and its |---| line
        if len(r) != len(COLUMNS):
            break
        table[r[0]] = dict(zip(COLUMNS, r))
    return table


TABLE = readme_table()


def test_the_table_lists_every_shipped_trace_and_the_default():
    shipped = {p.name for p in TRACES_DIR.glob("*.gz")}
    assert set(TABLE) == shipped and len(shipped) >= 2
    assert DEFAULT_TRACE.name in TABLE and DEFAULT_TRACE.is_file()
    for row in TABLE.values():
        assert re.fullmatch(r"[0-9a-f]{64}", row["sha256 (original, uncompressed)"])
        assert re.fullmatch(r"[0-9a-f]{64}", row["sha256 (.gz)"])
        assert row["rows"].isdigit()


@pytest.mark.parametrize("name", sorted(TABLE))
def test_shipped_trace_matches_its_checksums_and_row_count(name):
    row = TABLE[name]
    path = TRACES_DIR / name
    packed = path.read_bytes()
    assert hashlib.sha256(packed).hexdigest() == row["sha256 (.gz)"], f"{name}: the .gz changed"
    original = gzip.decompress(packed)
    assert hashlib.sha256(original).hexdigest() == row["sha256 (original, uncompressed)"], \
        f"{name}: the uncompressed content is not the original"
    read = read_trace(path)
    assert read.skipped == 0 and len(read.requests) == int(row["rows"])
    assert [r.request_id for r in read.requests[:3]] == [0, 1, 2]
