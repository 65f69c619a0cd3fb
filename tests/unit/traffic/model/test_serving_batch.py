"""traffic.model.serving_batch: the batched exchange path is the per-message path, phase by phase."""

import heapq
import itertools

import numpy as np
import pytest

from traffic.model import serving, serving_batch, serving_ideal
from traffic.model.expert import HitTable
from traffic.model.serving_events import Exchange, Send, Timer
from traffic.model.traces import Request

from .test_serving import moe_spec


def delay(src: int, dst: int, nbytes: int) -> float:
    """A made-up network: every message its own arrival time (no two alike)."""
    return 1e-4 + nbytes * 3e-6 + src * 1.3e-7 + dst * 1.7e-9


def drive(cluster: serving.Cluster) -> list[tuple]:
    """Run ``cluster`` on ``delay``'s network; every message sent, in order: (id, src, dst, bytes, kind, time)."""
    heap: list = []
    serial = itertools.count()
    sent = []

    def push(actions: list, now: float) -> None:
        for a in actions:
            if isinstance(a, Timer):
                heapq.heappush(heap, (a.at, next(serial), "timer", a.key))
            elif isinstance(a, Send):
                m = a.message
                sent.append((m.id, m.src_gpu, m.dst_gpu, m.bytes, m.kind, now))
                heapq.heappush(heap, (now + delay(m.src_gpu, m.dst_gpu, m.bytes), next(serial), "message", m.id))
            else:
                assert isinstance(a, Exchange)
                ends = [now + delay(int(s), int(d), int(b)) for s, d, b in zip(a.src, a.dst, a.bytes)]
                sent.extend((a.first_id + i, int(s), int(d), int(b), a.kind, now)
                         for i, (s, d, b) in enumerate(zip(a.src, a.dst, a.bytes)))
                last = len(ends) - 1 - int(np.argmax(ends[::-1]))  # of equal times, the one delivered last
                heapq.heappush(heap, (ends[last], next(serial), "exchange", (a.engine, a.first_id + last)))

    push(cluster.start(0.0), 0.0)
    while heap:
        at, _, what, key = heapq.heappop(heap)
        if at > cluster.spec.duration_s * 2:
            break
        if what == "timer":
            push(cluster.timer(key, at), at)
        elif what == "message":
            push(cluster.delivered(key, at), at)
        else:
            push(cluster.exchange_delivered(key[0], key[1], at), at)
    return sent


@pytest.mark.parametrize("chunk", [None, 40])
def test_the_batched_path_sends_the_same_messages_and_serves_the_same_requests(chunk):
    spec = moe_spec(chunk_bytes=chunk, duration_s=2.0, concurrency=16)
    reqs = [Request(i, 0.0, 3000 + 500 * (i % 5), 12) for i in range(40)]
    one, batched = serving.Cluster(spec, reqs), serving.Cluster(spec, reqs, batched=True)
    sent_one, sent_batched = drive(one), drive(batched)
    assert sum(1 for s in sent_batched if s[4] != "kv") > 300  # the exchanges ran
    assert sent_batched == sent_one
    assert batched.step_rows() == one.step_rows()
    assert batched.request_rows() == one.request_rows()
    assert batched.message_count == one.message_count == len(one.messages)
    assert batched.in_flight == one.in_flight
    assert len(batched.messages) < len(one.messages)  # the EP messages are not kept one by one


def test_a_phase_in_flight_counts_until_its_last_message_arrives():
    spec = moe_spec(duration_s=2.0)
    cluster = serving.Cluster(spec, [Request(1, 0.0, 2000, 3)], batched=True)
    pending = cluster.start(0.0)
    seen = None
    while pending and seen is None:
        a = pending.pop(0)
        if isinstance(a, Timer):
            pending += cluster.timer(a.key, a.at)
        elif isinstance(a, Send):
            pending += cluster.delivered(a.message.id, 0.5)
        else:
            seen = a
    assert seen is not None and seen.kind == "dispatch" and cluster.in_flight == len(seen)
    after = cluster.exchange_delivered(seen.engine, seen.first_id + len(seen) - 1, 0.6)
    assert isinstance(after[0], Exchange) and after[0].kind == "combine"
    assert cluster.in_flight == len(after[0])
    assert cluster.steps[-1].dispatch_last_id == seen.first_id + len(seen) - 1


def test_the_pair_table_draws_what_the_hit_table_draws():
    spec = moe_spec()
    group = tuple(range(17, 33))
    hits = HitTable(group, spec, 3, per_expert=True)
    table = serving_batch.PairTable(hits)
    tokens = {g: (g * 7) % 5 for g in group}  # some GPUs without tokens: no draw for them
    a, b, n = table.draw(tokens, np.random.default_rng(11))
    expect = sorted(hits.tokens(tokens, np.random.default_rng(11)).items())
    assert [((int(x), int(y)), int(c)) for x, y, c in zip(a, b, n)] == expect


def test_the_ideal_network_lives_beside_the_cluster_and_serves_the_batched_path_unchanged():
    assert serving.run_ideal is serving_ideal.run_ideal
    spec = moe_spec(duration_s=2.0)
    c = serving_ideal.run_ideal(serving.Cluster(spec, [Request(i, 0.0, 2000, 4) for i in range(8)]), 400e9)
    assert c.results()["throughput_tokens_per_s"] > 0 and not c.batched
