"""testbed.backends.paths: one routing rule for the engines that route by themselves, and an emulator run's
recorded paths followed connection by connection (no fabric, no ns-3)."""

from __future__ import annotations

import json

import pytest

from common.errors import TestbedError
from fabrics import addressing, build_fabric
from fabrics.routing import forwarding_tables, walk
from testbed.backends import paths
from testbed.backends.emulated import ecmp

CROSS_RAIL = ((1, 1), (18, 1))  # ROFT n=32: through a spine, so several paths
SAME_RAIL = ((1, 1), (17, 1))  # one leaf: one path


def _options(fabric, src, dst):
    return [tuple(zip(h, o)) for h, o in walk(fabric, forwarding_tables(fabric), src, dst)]


def _recording(tmp_path, fabric, conns_paths, kind=None, dport=paths.LISTEN_PORT):
    """An ecmp.json as the emulator writes it (ecmp.outcome), each connection with the given (forward, reverse)."""
    conns, learnt = [], {}
    for k, ((src, dst), (fwd, rev)) in enumerate(conns_paths):
        c = [addressing.ip_of(*src), 40000 + k, addressing.ip_of(*dst), dport]
        conns.append(c)
        if fwd is not None:
            learnt[tuple(c)] = tuple(zip(*fwd))
        if rev is not None:
            learnt[(tuple(c), ecmp.REVERSE)] = tuple(zip(*rev))
    doc = ecmp.outcome(fabric, conns, learnt, 0, False)
    if kind:
        doc["fabric"] = kind
    f = tmp_path / "ecmp.json"
    f.write_text(json.dumps(doc))
    return f


def test_without_a_recording_every_direction_is_one_of_the_models_paths_and_the_seed_draws_the_lottery():
    fabric = build_fabric("roft", gpus=32)
    src, dst = CROSS_RAIL
    spines = set()
    for seed in range(8):
        c = paths.PathBook(fabric, seed).connection(src, dst)
        assert c.forward in _options(fabric, src, dst) and c.reverse in _options(fabric, dst, src)
        assert c.dport == paths.LISTEN_PORT and not c.recorded
        assert paths.PathBook(fabric, seed).connection(src, dst) == c  # the same seed, the same outcome
        spines.add(c.forward[0])
    assert len(spines) > 1  # other seeds, other spines


def test_a_recorded_connection_takes_the_recorded_port_and_paths_not_the_models_hash(tmp_path):
    fabric = build_fabric("roft", gpus=32)
    src, dst = CROSS_RAIL
    hashed = paths.PathBook(fabric, 0).connection(src, dst)
    fwd = next(p for p in _options(fabric, src, dst) if p != hashed.forward)  # one the hash did not pick
    rev = next(p for p in _options(fabric, dst, src) if p != hashed.reverse)
    rec = paths.Recording.load(_recording(tmp_path, fabric, [((src, dst), (fwd, rev))]), fabric)
    book = paths.PathBook(fabric, 0, rec)
    c = book.connection(src, dst)
    assert (c.sport, c.forward, c.reverse, c.recorded) == (40000, fwd, rev, True)
    assert book.outcome()["hashed_multipath"] == 0 and book.outcome()["recorded_from"] == rec.source
    other = book.connection((2, 1), (19, 1))  # not recorded, several paths: the hash, and counted
    assert not other.recorded and book.outcome()["hashed_multipath"] == 2
    book.connection(*SAME_RAIL)  # one path each way: nothing to follow, nothing counted
    assert book.outcome()["hashed_multipath"] == 2


def test_a_recording_of_another_fabric_or_size_or_port_is_refused_in_one_line(tmp_path):
    roft32, roft16 = build_fabric("roft", gpus=32), build_fabric("roft", gpus=16)
    src, dst = CROSS_RAIL
    fwd, rev = _options(roft32, src, dst)[0], _options(roft32, dst, src)[0]
    f = _recording(tmp_path, roft32, [((src, dst), (fwd, rev))])
    with pytest.raises(TestbedError, match="recorded on 'roft': expected a zcube recording"):
        paths.Recording.load(f, build_fabric("zcube", gpus=32))
    with pytest.raises(TestbedError, match="is not a path of this") as e:
        paths.Recording.load(f, roft16)
    assert "\n" not in str(e.value) and e.value.key == "paths_from"
    with pytest.raises(TestbedError, match="expected the agents' port"):
        paths.Recording.load(_recording(tmp_path, roft32, [((src, dst), (fwd, rev))], dport=5201), roft32)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(TestbedError, match="not an emulator repetition's ecmp.json"):
        paths.Recording.load(tmp_path / "bad.json", roft32)


def test_the_emulators_record_keeps_each_direction(tmp_path):
    fabric = build_fabric("roft", gpus=32)
    src, dst = CROSS_RAIL
    fwd, rev = _options(fabric, src, dst)[1], _options(fabric, dst, src)[0]
    doc = json.loads(_recording(tmp_path, fabric, [((src, dst), (fwd, rev)), (((2, 1), (19, 1)), (None, None))])
                     .read_text())
    first, second = doc["flows"]
    assert first["path"] == [f"{s}:{p}" for s, p in fwd] and first["reverse_path"] == [f"{s}:{p}" for s, p in rev]
    assert second["path"] is None and second["reverse_path"] is None
    assert sum(doc["flows_per_switch_link"].values()) == 4  # leaf -> spine -> leaf, each way of the first
