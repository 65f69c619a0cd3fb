"""ROFT's ECMP outcome is a function of the 5-tuple alone: OVS's userspace select group sends the same 5-tuple
to the same spine every time it is asked, and again on a fabric built anew, so a repetition's recorded hash
seed (its source ports) reproduces its outcome. Probed with TCP RSTs (testbed.backends.emulated.ecmp), 48
cross-rail 5-tuples with ports drawn from one seed, on two ROFT n=32 fabrics one after the other."""

from __future__ import annotations

from fabrics import addressing
from fabrics.routing import forwarding_tables, walk
from tests.support.integration import leftovers, run_testbed
from traffic.runtime.ports import source_port


def _probe_all(flows, candidates, ports):
    from testbed.backends.emulated.ecmp import QueueProber
    from testbed.emulation import ecmp_probe, fabricctl, qstats

    st = fabricctl.load_state()
    reader = qstats.QueueReader(st.queues)
    prober = QueueProber(flows, candidates, reader)
    try:
        return [{k: path for k, (_, path) in ecmp_probe.learn(candidates, prober, ports, max_rounds=60).items()}
                for _ in range(2)]
    finally:
        prober.close()
        reader.close()


def test_the_same_five_tuple_takes_the_same_spine_in_one_fabric_and_the_next():
    from fabrics import build_fabric

    fabric = build_fabric("roft", gpus=32)
    tables = forwarding_tables(fabric)
    flows, candidates, ports, used = {}, {}, {}, set()
    for a in range(1, 9):
        for b in (18, 19, 20, 21, 26, 27):
            src, dst = (a, 1), (b, 1)
            paths = walk(fabric, tables, src, dst)
            if len(paths) < 2:
                continue
            key = (a, b)
            flows[key], candidates[key] = (src, dst, 7000), paths
            ports[key] = source_port(11, addressing.ip_of(*src), addressing.ip_of(*dst), used)
    assert len(flows) >= 40
    outcomes = []
    for _ in range(2):
        run_testbed("up", "roft", check=True)
        try:
            outcomes += _probe_all(flows, candidates, ports)
        finally:
            run_testbed("down", check=True)
    first = outcomes[0]
    assert len(first) == len(flows)  # every probe showed exactly one path
    spines = {path[0][1] for path in first.values()}
    assert len(spines) > 1  # the hash spreads them (not a constant bucket)
    for other in outcomes[1:]:
        assert other == first
    assert leftovers() == []
