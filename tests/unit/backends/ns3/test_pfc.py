"""PFC on the twin in a 4-to-1 incast (ZCube n=16: two senders behind each odd switch, one destination NIC
port): lossless with PFC on (pauses and resumes in the log, spreading one hop up to the NICs), drops with
it off; the pause log reads as the emulator's pfc.txt."""

from __future__ import annotations

import dataclasses

import pytest

from common.errors import TestbedError
from fabrics import addressing, build_fabric
from fabrics.datapath import DatapathConfig
from pfc import analysis
from pfc.policy import PfcConfig
from testbed.backends.base import LinkSettings
from testbed.backends.ns3 import apps, assumptions, engine, pfc, plan, summarise

FRAME = 3014
# 5 frames: XOFF (half) and one feeding link's headroom (2 frames and a few bytes) must fit in the buffer
LINK = LinkSettings.of(DatapathConfig(buffer_bytes=5 * FRAME).validate(), 200e9)
DST = (1, 2)


def _senders(fabric):
    by_switch: dict[str, list[int]] = {}
    for g in fabric.gpus():
        if g != DST[0]:
            by_switch.setdefault(fabric.switch_of(g, 1), []).append(g)
    return [g for gs in sorted(by_switch.values()) for g in gs[:2]]


def _incast(pfc_on: bool, tmp_path, alpha=None, fabric=None, senders=None, link=LINK, dst=DST, used=None,
            headroom=None, model=None):
    fabric = fabric or build_fabric("zcube", gpus=16)
    reaction_s = (model or assumptions.DEFAULT).pause_reaction_us * 1e-6
    resolved = pfc.resolve(PfcConfig(enabled=pfc_on, dynamic_alpha=alpha), link, plan.CABLE_DELAY_S, reaction_s)
    engine.load()
    engine.configure(link.mtu, 0)
    built = plan.build(fabric, link, resolved, 0, model=model)
    if headroom is not None:  # a wrong headroom, planted past the policy's checks
        built.twin.headroom = headroom
    rows = [{"id": i, "src": f"gpu{g}", "dst": f"gpu{dst[0]}", "src_ip": addressing.ip_of(g, 3 - dst[1]),
             "dst_ip": addressing.ip_of(*dst), "bytes": 150_000, "start": 0.0}
            for i, g in enumerate(senders or _senders(fabric))]
    try:
        sent, sampler = apps.carry(built, rows)
        merged = summarise.merged_rows(sent, built.twin, key=lambda i, _r: i)
        counters = summarise.counters(built, sampler)
        log = pfc.pause_log(resolved, str(built.twin.Log()))
        if used is not None:
            used.update(most=int(built.twin.headroomUsed), over=int(built.twin.headroomDrops))
        summarise.write_speed(tmp_path, summarise.speed(wall_s=1.0, build_s=0.1, load_s=engine.load_s(),
                                                        sim_s=float(engine.load().Now()), cluster_s=1.0,
                                                        events=int(engine.load().Events()),
                                                        packets=summarise.packets(sampler), gpus=16, kind="zcube"))
    finally:
        del built.twin
        engine.load().Destroy()
    return resolved, merged, counters, log


def test_pfc_keeps_the_incast_lossless_and_pauses_spread_one_hop_up(tmp_path):
    resolved, rows, counters, log = _incast(True, tmp_path)
    assert len(rows) == 4 and all(r["verified"] and r["end"] > r["first_byte"] >= 0 for r in rows)
    assert counters.drops("switch") == 0
    pfc.check_lossless(resolved, counters.drops("switch"))
    (tmp_path / "pfc.txt").write_text("\n".join(log.lines) + "\n")
    events = analysis.read_events(tmp_path / "pfc.txt")
    assert {e.event for e in events} == {0, 1}  # pauses and resumes
    paused_nodes = {e.node_type for e in events if e.event == 1}
    assert paused_nodes == {0, 1}  # switch ports feeding the destination's queue, then the NICs behind them
    assert analysis.spread(events)["max_hops"] >= 2
    assert all(e.cause.startswith("sw") for e in events)
    # every pause is resumed by the end (the last holder lets go)
    state: dict[str, int] = {}
    for e in events:
        state[e.queue] = e.event
    assert set(state.values()) == {0}
    speed = (tmp_path / "twin.json").read_text()
    assert '"events_per_wall_s"' in speed and '"peak_rss_mb"' in speed


def test_without_pfc_the_same_incast_drops_and_logs_no_pause(tmp_path):
    resolved, rows, counters, log = _incast(False, tmp_path)
    assert resolved is None and not log.enabled and log.lines == ()
    assert counters.drops("switch") > 0  # TCP recovers: every message still arrives
    assert all(r["verified"] for r in rows)


def test_dynamic_thresholds_keep_the_incast_lossless(tmp_path):
    resolved, rows, counters, log = _incast(True, tmp_path, alpha=0.5)
    assert resolved.dynamic_alpha == 0.5 and all(r["verified"] for r in rows)
    assert counters.drops("switch") == 0
    assert {ln.split()[4] for ln in log.lines} == {"0", "1"}  # pauses and resumes


def test_a_fabric_drop_with_pfc_on_fails_the_run():
    resolved = pfc.resolve(PfcConfig(), LINK, plan.CABLE_DELAY_S)
    with pytest.raises(TestbedError, match="lossless invariant"):
        pfc.check_lossless(resolved, 3)
    pfc.check_lossless(None, 3)  # PFC off: drops are the fabric's business
    assert dataclasses.asdict(resolved)["enabled"] is True


@pytest.mark.parametrize("choice", ["spread", "one-switch"])
def test_an_8_to_1_incast_pauses_and_never_drops(choice, tmp_path):
    """8 senders into one NIC port at the default experiment's link settings (buffer 60 KB, 3000 B MTU): every
    feeding link stays within its headroom (what it can deliver after its hold: 2 frames + a few bytes), so
    nothing drops, and the queue did pause its feeders. "spread": bench pfc's choice of senders (round robin
    over switches); "one-switch": senders whose NICs share one switch, so eight NICs feed that switch's queue
    towards the destination (layersplit's case). The emulator's twin of this test is tests/integration/test_pfc.py."""
    from testbed.bench.pfc import incast_senders, one_switch_senders

    fabric = build_fabric("zcube", gpus=32)
    link = LinkSettings.of(DatapathConfig().validate(), 200e9)
    senders = (incast_senders if choice == "spread" else one_switch_senders)(fabric, DST, 8)
    assert len(senders) == 8 and DST[0] not in senders
    used: dict = {}
    resolved, rows, counters, log = _incast(True, tmp_path, fabric=fabric, senders=senders, link=link, used=used)
    assert all(r["verified"] for r in rows) and len(rows) == 8
    assert counters.drops("switch") == 0 and used["over"] == 0, (counters.drops("switch"), used)
    pauses = [ln for ln in log.lines if ln.split()[4] == "1"]
    assert pauses, "the incast never paused a feeder"
    assert 0 < used["most"] <= resolved.headroom_bytes, (used, resolved.headroom_bytes)
    assert resolved.xoff_bytes + resolved.headroom_bytes <= link.buffer_bytes


def test_a_slower_pause_reaction_lands_the_hold_later_and_stays_lossless(tmp_path):
    """The emulator's pause daemon reacts in ~0.3 ms, not a MAC's 2 us (twin.pause_reaction_us): in the
    one-switch 8-to-1 incast at the default link settings a 20 ms reaction lands the first hold 20 ms - 2 us
    later (nothing differs before the first crossing), lets a held link deliver more than the 2 frames of the
    default, and the headroom grown with it keeps the queue lossless."""
    from testbed.bench.pfc import one_switch_senders

    fabric = build_fabric("zcube", gpus=32)
    link = LinkSettings.of(DatapathConfig().validate(), 200e9)
    senders = one_switch_senders(fabric, DST, 8)
    runs = {}
    for us in (2.0, 20_000.0):
        used: dict = {}
        model = dataclasses.replace(assumptions.DEFAULT, pause_reaction_us=us)
        resolved, rows, counters, log = _incast(True, tmp_path, fabric=fabric, senders=senders, link=link,
                                                used=used, model=model)
        assert all(r["verified"] for r in rows) and counters.drops("switch") == 0 and used["over"] == 0
        first = min(int(ln.split()[0]) for ln in log.lines if ln.split()[4] == "1")
        runs[us] = (resolved, used, first)
    (fast, fast_used, fast_first), (slow, slow_used, slow_first) = runs[2.0], runs[20_000.0]
    assert fast == pfc.resolve(PfcConfig(), link, plan.CABLE_DELAY_S)  # the default is today's twin
    assert abs((slow_first - fast_first) - (20_000 - 2) * 1000) < 1000, (fast_first, slow_first)
    assert slow.headroom_bytes > fast.headroom_bytes
    assert fast_used["most"] <= 2 * FRAME < slow_used["most"] <= slow.headroom_bytes, (fast_used, slow_used)


def test_xoff_and_headroom_must_fit_in_the_buffer():
    tight = LinkSettings.of(DatapathConfig(buffer_bytes=4 * FRAME).validate(), 200e9)  # xoff 2 frames
    with pytest.raises(TestbedError, match="do not fit in the 12056 B buffer"):
        pfc.resolve(PfcConfig(), tight, plan.CABLE_DELAY_S)
    default = LinkSettings.of(DatapathConfig().validate(), 200e9)  # 60 KB, xoff 30 KB, 3 Mbit/s
    pfc.resolve(PfcConfig(), default, plan.CABLE_DELAY_S, 20e-3)  # 6 KB + 7.5 KB of headroom fit
    with pytest.raises(TestbedError, match="do not fit in the 60000 B buffer"):
        pfc.resolve(PfcConfig(), default, plan.CABLE_DELAY_S, 0.1)  # 6 KB + 37.5 KB do not
    with pytest.raises(TestbedError, match="below the"):
        pfc.resolve(PfcConfig(headroom_bytes=2 * FRAME), LINK, plan.CABLE_DELAY_S)


def test_a_link_over_its_headroom_drops_and_the_run_fails(tmp_path):
    """The invariant on real parts: the same 8-to-1 incast with each link's headroom planted at one frame (a
    held link delivers up to two) drops at the hot queue, and the lossless check fails it."""
    from testbed.bench.pfc import one_switch_senders

    fabric = build_fabric("zcube", gpus=32)
    link = LinkSettings.of(DatapathConfig().validate(), 200e9)
    used: dict = {}
    resolved, rows, counters, _ = _incast(True, tmp_path, fabric=fabric, link=link, used=used, headroom=FRAME,
                                          senders=one_switch_senders(fabric, DST, 8))
    assert used["over"] > 0 and counters.drops("switch") >= used["over"]
    with pytest.raises(TestbedError, match="lossless invariant"):
        pfc.check_lossless(resolved, counters.drops("switch"))
