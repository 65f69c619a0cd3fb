"""The queue sampler's netlink decoder (``testbed.emulation.qstats``) against the pyroute2 reader it replaced,
on dumps saved from a real ZCube n=32 fabric (a GPU namespace whole, 24 of the root namespace's switch queues):
the same rows, field for field; and a queue whose device or bfifo is missing has no counters."""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

import pytest

from testbed.emulation import qstats

DATA = Path(__file__).parents[2] / "support" / "data"


def _parts() -> tuple[bytes, bytes, bytes, bytes]:
    blob = gzip.decompress((DATA / "qdisc_dump.bin.gz").read_bytes())
    parts, off = [], 0
    while off < len(blob):
        (n,) = struct.unpack_from("=I", blob, off)
        parts.append(blob[off + 4:off + 4 + n])
        off += 4 + n
    return tuple(parts)


def _queues() -> dict:
    return json.loads((DATA / "qdisc_dump_queues.json").read_text())


def reference_rows(ipr, queues: list[dict]) -> list[dict]:
    """The pyroute2 reader the sampler used before (testbed/emulation/fabricctl.py ``_queue_rows`` until
    this change), verbatim."""
    index = {link.get_attr("IFLA_IFNAME"): link["index"] for link in ipr.get_links()}
    qdiscs: dict[int, list] = {}
    for qd in ipr.get_qdiscs():
        qdiscs.setdefault(qd["index"], []).append(qd)
    rows = []
    for q in queues:
        idx = index.get(q["dev"])
        row = {"queue": q["qid"], "towards": q["towards"], "kind": q["kind"]}
        for qd in qdiscs.get(idx, []) if idx is not None else []:
            if qd.get_attr("TCA_KIND") == "bfifo":
                s2 = qd.get_attr("TCA_STATS2")
                qs, basic = s2.get_attr("TCA_STATS_QUEUE"), s2.get_attr("TCA_STATS_BASIC")
                row.update(backlog=qs["backlog"], qlen=qs["qlen"], drops=qs["drops"],
                           packets=basic["packets"], bytes=basic["bytes"])
        rows.append(row)
    return rows


class _SavedIPRoute:
    """pyroute2's own decoding of the saved dumps, behind IPRoute's two calls."""

    def __init__(self, qdiscs: bytes, links: bytes) -> None:
        from pyroute2.netlink.rtnl.marshal import MarshalRtnl

        def parse(data):
            return [m for m in MarshalRtnl().parse(data) if m["header"]["type"] in (16, 36)]

        self._q, self._l = parse(qdiscs), parse(links)

    def get_links(self):
        return self._l

    def get_qdiscs(self):
        return self._q


@pytest.mark.parametrize("which", ["root", "gpu"])
def test_rows_from_a_saved_dump_equal_the_pyroute2_readers(which):
    root_qd, root_ln, gpu_qd, gpu_ln = _parts()
    qd, ln = (root_qd, root_ln) if which == "root" else (gpu_qd, gpu_ln)
    queues = _queues()[which]
    want = reference_rows(_SavedIPRoute(qd, ln), queues)
    got = qstats.rows(queues, qstats.link_index(ln), qstats.leaf_stats(qd))
    assert got == want
    assert all("bytes" in r and "backlog" in r for r in got)  # every queue of the dump has its counters
    assert any(r["bytes"] > 0 for r in got)


def test_a_queue_without_device_or_leaf_has_no_counters():
    root_qd, root_ln, _, _ = _parts()
    queues = _queues()["root"][:2]
    gone = dict(queues[0], dev="no-such-dev", qid="sw9:9")
    index = qstats.link_index(root_ln)
    rows = qstats.rows([gone, queues[1]], index, qstats.leaf_stats(root_qd))
    assert rows[0] == {"queue": "sw9:9", "towards": gone["towards"], "kind": gone["kind"]}
    assert "bytes" in rows[1]
    no_leaf = qstats.rows([queues[1]], index, {})
    assert set(no_leaf[0]) == {"queue", "towards", "kind"}


def test_messages_stop_at_a_truncated_header():
    root_qd, *_ = _parts()
    whole = list(qstats.messages(root_qd))
    assert len(list(qstats.messages(root_qd[:-3]))) <= len(whole)
    assert list(qstats.messages(b"\x01\x00")) == []
