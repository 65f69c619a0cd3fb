"""fabrics.cost: the parts each fabric needs, counted at n=32 and at the listed scales."""

import pytest

from fabrics import build_fabric
from fabrics.cost import cost_of, cost_table


def test_cost_counts_at_n32():
    z = cost_of(build_fabric("zcube", gpus=32))
    r = cost_of(build_fabric("roft", gpus=32))
    assert (z.switches, z.host_cables, z.fabric_cables, z.transceivers) == (8, 64, 32, 192)
    assert (r.switches, r.host_cables, r.fabric_cables, r.transceivers) == (12, 64, 64, 256)


def test_cost_table_at_the_listed_scales():
    rows = {row["gpus"]: row for row in cost_table()}
    assert sorted(rows) == [32, 64, 1024, 16384]
    assert rows[16384]["zcube"]["switches"] == 256 and rows[16384]["roft"]["switches"] == 384
    assert rows[1024]["zcube"]["switches"] == 16 and rows[1024]["roft"]["switches"] == 24
    for row in rows.values():
        assert row["ratio"]["switches"] == pytest.approx(2 / 3, abs=1e-3)
        assert row["ratio"]["fabric_transceivers"] == pytest.approx(0.5)
        assert row["ratio"]["transceivers"] == pytest.approx(0.75)
