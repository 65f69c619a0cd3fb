"""Placement of instances on GPUs and scheduler policies."""

from __future__ import annotations

import pytest

from common.errors import TestbedError
from traffic.model.placement import Instance, Scheduler, gpu_local_rank, gpu_server, place
from traffic.model.traces import Request


def test_gpu_numbering():
    assert [gpu_server(g) for g in (1, 8, 9, 16, 17)] == [1, 1, 2, 2, 3]
    assert [gpu_local_rank(g) for g in (1, 8, 9, 12)] == [0, 7, 0, 3]
    assert gpu_server(5, gpus_per_server=4) == 2


def test_split_placement_by_fraction():
    pl = place(32, prefill_tp=4, decode_tp=2)
    assert [i.gpus for i in pl.prefill] == [tuple(range(1, 5)), tuple(range(5, 9)),
                                            tuple(range(9, 13)), tuple(range(13, 17))]
    assert len(pl.decode) == 8 and pl.decode[0].gpus == (17, 18) and pl.decode[-1].gpus == (31, 32)
    assert [i.index for i in pl.decode] == list(range(8))
    assert {i.server() for i in pl.prefill} == {1, 2} and {i.server() for i in pl.decode} == {3, 4}
    pl = place(32, 8, 8, prefill_fraction=0.25)
    assert (len(pl.prefill), len(pl.decode)) == (1, 3)


def test_interleaved_placement():
    pl = place(32, 8, 8, layout="interleaved")
    assert [i.server() for i in pl.prefill] == [1, 3]
    assert [i.server() for i in pl.decode] == [2, 4]


def test_explicit_counts_leave_idle_gpus():
    pl = place(32, 2, 8, n_prefill=3, n_decode=2)
    assert [i.gpus for i in pl.prefill] == [(1, 2), (3, 4), (5, 6)]
    assert [i.gpus for i in pl.decode] == [tuple(range(9, 17)), tuple(range(17, 25))]


@pytest.mark.parametrize("kwargs,message", [
    (dict(n_gpus=12, prefill_tp=4, decode_tp=4), "n_gpus 12 is not whole servers"),
    (dict(n_gpus=16, prefill_tp=3, decode_tp=4), "prefill_tp 3 does not divide gpus_per_server 8"),
    (dict(n_gpus=16, prefill_tp=4, decode_tp=16), "decode_tp 16 does not divide"),
    (dict(n_gpus=8, prefill_tp=4, decode_tp=4), "n_gpus 8 is 1 server; expected at least 2"),
    (dict(n_gpus=32, prefill_tp=4, decode_tp=4, prefill_fraction=0.05), "gives 0 prefill servers"),
    (dict(n_gpus=32, prefill_tp=4, decode_tp=4, prefill_fraction=-1), "prefill_fraction -1"),
    (dict(n_gpus=16, prefill_tp=8, decode_tp=8, n_prefill=2, n_decode=1), "need 3 servers"),
    (dict(n_gpus=16, prefill_tp=8, decode_tp=8, n_prefill=1), "only one given"),
    (dict(n_gpus=16, prefill_tp=8, decode_tp=8, layout="random"), "layout 'random'"),
])
def test_place_validation(kwargs, message):
    with pytest.raises(TestbedError, match=message) as info:
        place(**kwargs)
    assert "\n" not in str(info.value)


def test_instance_validation():
    with pytest.raises(TestbedError, match="not consecutive"):
        Instance("prefill", 0, (1, 3))
    with pytest.raises(TestbedError, match="instance kind 'encode'"):
        Instance("encode", 0, (1,))


REQS = [Request(i, i * 0.1, 1000 * (1 + i % 3), 10) for i in range(30)]


def _run(policy, seed):
    pl = place(32, 4, 4)
    sch = Scheduler(policy, seed)
    return [(a.prefill.index, a.decode.index) for a in (sch.assign(r, pl) for r in REQS)]


def test_round_robin_cycles():
    assert _run("round_robin", 0)[:5] == [(0, 0), (1, 1), (2, 2), (3, 3), (0, 0)]


def test_random_is_seeded():
    assert _run("random", 7) == _run("random", 7)
    assert _run("random", 7) != _run("random", 8)
    assert {p for p, _ in _run("random", 7)} == {0, 1, 2, 3}


def test_least_loaded_picks_fewest_outstanding_tokens():
    pl = place(32, 8, 8)  # 2 prefill, 2 decode
    sch = Scheduler("least_loaded")
    big, small, third = Request(0, 0.0, 5000, 0), Request(1, 0.0, 100, 0), Request(2, 0.0, 100, 0)
    assert sch.assign(big, pl).prefill.index == 0
    assert sch.assign(small, pl).prefill.index == 1
    assert sch.assign(third, pl).prefill.index == 1      # 100 < 5000 outstanding
    sch.release(0, prefill_done_s=1.0, decode_done_s=1.0)
    late = Request(3, 2.0, 100, 0)
    assert sch.assign(late, pl).prefill.index == 0       # big finished by t=2
    assert _run("least_loaded", 0) == _run("least_loaded", 0)


def test_scheduler_validation():
    with pytest.raises(TestbedError, match="scheduler policy 'fastest'"):
        Scheduler("fastest")
    sch = Scheduler("least_loaded")
    pl = place(16, 8, 8)
    sch.assign(REQS[0], pl)
    with pytest.raises(TestbedError, match="assigned twice"):
        sch.assign(REQS[0], pl)
    with pytest.raises(TestbedError, match="another placement"):
        sch.assign(REQS[1], place(16, 8, 8))
