"""testbed.backends.fluid.solver: max-min fair rates against cases whose answer is known by construction, against
the fabric model's reference progressive filling, and the event loop's times."""

import numpy as np
import pytest

from fabrics.maxmin import max_min
from testbed.backends.fluid.solver import Network, maxmin, maxmin_of


def rates(flows: list[list[tuple[int, float]]], caps: list[float]) -> list[float]:
    """``maxmin`` of flows given as [(link, coefficient), ...] over links of capacities ``caps``."""
    n, width = len(flows), max(len(f) for f in flows)
    links, coefs = np.zeros((n, width), dtype=np.int64), np.zeros((n, width))
    nlinks = np.array([len(f) for f in flows], dtype=np.int64)
    for i, f in enumerate(flows):
        for k, (lk, c) in enumerate(f):
            links[i, k], coefs[i, k] = lk, c
    out = np.zeros(n)
    mark = np.full(len(caps), -1, dtype=np.int64)
    maxmin(n, links, coefs, nlinks, np.array(caps, dtype=float), out, mark, np.zeros(len(caps), dtype=np.int64),
           np.zeros(n, dtype=np.bool_))
    assert (mark == -1).all()  # the scratch is left as found
    return out.tolist()


def test_two_flows_on_one_link_share_it_equally():
    assert rates([[(0, 1.0)], [(0, 1.0)]], [10.0]) == [5.0, 5.0]


def test_a_flow_bottlenecked_elsewhere_leaves_its_share_to_the_others():
    # flow 0 crosses links 0 and 1; link 1 (4) is shared with flow 2: 2 each; link 0 (10) gives flow 1 the other 8
    assert rates([[(0, 1.0), (1, 1.0)], [(0, 1.0)], [(1, 1.0)]], [10.0, 4.0]) == [2.0, 8.0, 2.0]


def test_a_chain_of_bottlenecks_fills_in_order():
    # link 2 (3) splits between flows 1 and 2: 1.5 each; link 0 (9) between flows 0 and 3: 4.5 each, which link 1
    # (10) allows beside flow 1's 1.5
    assert rates([[(0, 1.0), (1, 1.0)], [(1, 1.0), (2, 1.0)], [(2, 1.0)], [(0, 1.0)]], [9.0, 10.0, 3.0]) == \
        [4.5, 1.5, 1.5, 4.5]


def test_a_coefficient_is_the_share_of_a_flows_rate_a_link_carries():
    # flow 0 puts half its rate on link 1 (its acknowledgements): 0.5 r + r = 6 -> r = 4 for both
    assert rates([[(0, 1.0), (1, 0.5)], [(1, 1.0)]], [10.0, 6.0]) == [4.0, 4.0]


def test_random_cases_match_the_fabric_models_progressive_filling():
    rng = np.random.default_rng(3)
    for _ in range(300):
        n_links, n_flows = int(rng.integers(2, 12)), int(rng.integers(1, 25))
        caps = rng.uniform(1.0, 10.0, n_links)
        flows = [[(int(lk), 1.0) for lk in rng.choice(n_links, size=int(rng.integers(1, min(4, n_links) + 1)),
                                                     replace=False)] for _ in range(n_flows)]
        ref = max_min({str(i): [str(lk) for lk, _ in f] for i, f in enumerate(flows)},
                      {str(lk): float(c) for lk, c in enumerate(caps)})
        assert rates(flows, list(caps)) == pytest.approx([ref[str(i)] for i in range(n_flows)], rel=1e-9)


def test_a_component_solved_alone_gets_the_whole_solves_rates_and_leaves_the_others():
    # random flows on links 0-5 and 6-11 (two halves no flow spans): each half solved alone, the other's rates kept
    rng = np.random.default_rng(5)
    for _ in range(100):
        flows = [sorted(rng.choice(6, size=int(rng.integers(1, 4)), replace=False) + 6 * int(rng.integers(0, 2)))
                 for _ in range(int(rng.integers(2, 20)))]
        n, caps = len(flows), rng.uniform(1.0, 10.0, 12)
        links, nlinks = np.zeros((n, 3), dtype=np.int64), np.array([len(f) for f in flows], dtype=np.int64)
        for i, f in enumerate(flows):
            links[i, :len(f)] = f
        coefs, mark = np.ones((n, 3)), np.full(12, -1, dtype=np.int64)
        scratch = (mark, np.zeros(12, dtype=np.int64), np.zeros(n, dtype=np.bool_))
        whole = np.zeros(n)
        maxmin(n, links, coefs, nlinks, caps, whole, *scratch)
        half = np.array([i for i, f in enumerate(flows) if f[0] < 6], dtype=np.int64)
        alone = np.full(n, -1.0)
        maxmin_of(half, len(half), links, coefs, nlinks, caps, alone, *scratch)
        assert (mark == -1).all()
        assert alone[half].tolist() == whole[half].tolist()  # the same operations in the same order: equal
        assert (np.delete(alone, half) == -1.0).all()


def one_link_network(batch_s: float = 0.0) -> Network:
    return Network(np.array([10.0, 10.0]), 2, batch_s)


def add(net: Network, sizes: list[float], group: int, tags: list[int], lat: float = 0.5) -> None:
    m = len(sizes)
    net.add(np.tile([0, 1], (m, 1)), np.ones((m, 2)), np.full(m, 2), np.full(m, 2), np.array(sizes, dtype=float),
            np.full(m, lat), np.full(m, group), np.array(tags), np.full(m, 2), np.zeros(m, dtype=np.int64))


def test_flows_share_then_the_survivor_takes_the_link_and_the_group_ends_at_its_last_delivery():
    net = one_link_network()
    g = net.new_group(2)
    add(net, [10.0, 20.0], g, [0, 1])
    # 5 B/s each until flow 0 has drained (t=2), then flow 1 alone at 10 B/s: its last 10 B by t=3; +0.5 latency
    assert net.advance(100.0) == (g, 3.5)
    assert net.m_end[:2].tolist() == [2.5, 3.5] and net.last_of(g) == 1
    assert net.nbytes.tolist() == [30.0, 30.0] and net.npk.tolist() == [4, 4]  # every byte and packet counted
    assert net.advance(100.0) is None and net.now == 100.0 and net.flows == 0


def test_arrivals_at_one_instant_are_one_solve_and_the_clock_stops_where_asked():
    net = one_link_network()
    g1, g2 = net.new_group(1), net.new_group(1)
    add(net, [10.0], g1, [0])
    add(net, [10.0], g2, [1])
    assert net.advance(1.0) is None and net.now == 1.0 and net.solves == 1
    assert net.nbytes.tolist() == [10.0, 10.0]  # 1 s at the whole link's rate, shared
    assert net.advance(100.0) == (g1, 2.5) and net.advance(100.0) == (g2, 2.5)  # equal times: in group order


def test_departures_within_the_batch_leave_together():
    net = one_link_network(batch_s=0.01)
    g = net.new_group(2)
    add(net, [10.0, 10.04], g, [0, 1], lat=0.0)
    assert net.advance(100.0) == (g, 2.0)  # 10.04 B would take 0.004 s longer: it leaves with the other
    assert net.m_end[:2].tolist() == [2.0, 2.0] and net.solves == 2 and net.nbytes[0] == pytest.approx(20.04)


def test_a_messages_acknowledgements_flow_back_once_it_has_left_and_take_their_share_then():
    net = Network(np.array([10.0, 10.0]), 2)
    ga, gb = net.new_group(1), net.new_group(1)
    # a: 10 B on link 0, 5 B of acknowledgements back on link 1; b: 20 B on link 1
    net.add(np.array([[0, 1]]), np.ones((1, 2)), np.array([2]), np.array([1]), np.array([10.0]), np.array([0.0]),
            np.array([ga]), np.array([0]), np.array([1]), np.array([1]), back=np.array([5.0]))
    net.add(np.array([[1, 0]]), np.ones((1, 2)), np.array([1]), np.array([1]), np.array([20.0]), np.array([0.0]),
            np.array([gb]), np.array([1]), np.array([1]), np.array([0]))
    # until t=1 b has link 1 alone (a's acks are not sent yet); then the acks share it: 5 B each by t=2, b's
    # last 5 B alone by t=2.5
    assert net.advance(100.0) == (ga, 1.0)
    assert net.advance(100.0) == (gb, 2.5)
    assert net.nbytes.tolist() == [10.0, 25.0] and net.npk.tolist() == [1, 2] and net.flows == 0


class Reference:
    """The event loop as the module's docstring states it, in plain Python, every rate from ``maxmin`` over every flow
    of the fabric at every event (no component solves, no index kept across events): the solver must deliver at
    the same times to the bit."""

    def __init__(self, cap: np.ndarray, K: int, batch_s: float) -> None:
        self.cap, self.K, self.batch_s = cap, K, batch_s
        self.flows: list[list] = []  # [forward links, reverse links, bytes left, ack bytes, latency, group, tag]
        self.now, self.pending, self.left, self.end, self.m_end = 0.0, [], [], [], {}

    def new_group(self, size: int) -> int:
        self.left.append(size)
        self.end.append((-np.inf, -1))
        return len(self.left) - 1

    def add(self, fwd: list, rev: list, nbytes: float, back: float, lat: float, group: int, tag: int) -> None:
        self.flows.append([fwd, rev, nbytes, back, lat, group, tag])

    def rates(self) -> list[float]:
        n = len(self.flows)
        links, coefs = np.zeros((n, self.K), dtype=np.int64), np.ones((n, self.K))
        nlinks = np.array([len(f[0]) for f in self.flows], dtype=np.int64)
        for i, f in enumerate(self.flows):
            links[i, :len(f[0])] = f[0]
        out = np.zeros(n)
        maxmin(n, links, coefs, nlinks, self.cap, out, np.full(len(self.cap), -1, dtype=np.int64),
               np.zeros(len(self.cap), dtype=np.int64), np.zeros(n, dtype=np.bool_))
        return out.tolist()

    def advance(self, t_stop: float):
        while True:
            rate = self.rates()
            t_drain = min((self.now + f[2] / r for f, r in zip(self.flows, rate) if r > 0.0), default=np.inf)
            t_done, g = min(self.pending, default=(np.inf, -1))
            t_next = min(t_drain, t_done, t_stop)
            if t_next > self.now:
                for f, r in zip(self.flows, rate):
                    f[2] -= r * (t_next - self.now)
            self.now = t_next
            if g >= 0 and t_done <= t_drain and t_done <= t_stop:
                self.pending.remove((t_done, g))
                return g, t_done
            if t_drain > t_stop:
                return None
            i = 0
            while i < len(self.flows):
                f, r = self.flows[i], rate[i]
                if not (f[2] <= r * self.batch_s or f[2] <= 0.0):
                    i += 1
                    continue
                if f[5] >= 0:
                    d = t_next + f[4]
                    self.m_end[f[6]] = d
                    self.end[f[5]] = max(self.end[f[5]], (d, f[6]))
                    self.left[f[5]] -= 1
                    if self.left[f[5]] == 0:
                        self.pending.append((self.end[f[5]][0], f[5]))
                if f[1] and f[3] > 0.0:  # the acknowledgements take the message's place
                    self.flows[i], rate[i] = [f[1], [], f[3], 0.0, 0.0, -1, -1], 0.0
                    i += 1
                    continue
                self.flows[i], rate[i] = self.flows[-1], rate[-1]
                self.flows.pop()
                rate.pop()


def test_a_random_workload_is_delivered_at_the_whole_fabric_solves_times_to_the_bit():
    # many arrivals and departures on shared links (equal capacities, so ties, in half the cases), acknowledgements
    # and same-instant batches: every group and every message at the reference's times, exactly
    rng = np.random.default_rng(11)
    for case in range(40):
        n_links, K = int(rng.integers(3, 16)), 6
        cap = np.full(n_links, 10.0) if case % 2 else rng.uniform(2.0, 20.0, n_links)
        batch = float(rng.choice([1e-3, 0.01]))  # some, as the product always has: with none a rounding residue stalls
        net, ref = Network(cap, K, batch), Reference(cap, K, batch)
        got, want, tag = [], [], 0
        starts = np.sort(rng.uniform(0.0, 20.0, int(rng.integers(5, 60))))
        for t in list(starts) + [1e9]:
            for side, out in ((net, got), (ref, want)):
                while (done := side.advance(float(t))) is not None:
                    out.append(done)
            if t == 1e9:
                break
            m = int(rng.integers(1, 5))
            g, g_ref = net.new_group(m), ref.new_group(m)
            links = np.zeros((m, K), dtype=np.int64)
            nlinks, nfwd = np.zeros(m, dtype=np.int64), np.zeros(m, dtype=np.int64)
            size, back = rng.integers(1, 40, m).astype(float), rng.integers(0, 3, m).astype(float)
            lat = rng.choice([0.0, 0.25], m)
            for i in range(m):
                fwd = [int(x) for x in rng.choice(n_links, int(rng.integers(1, 4)), replace=False)]
                rev = [int(x) for x in rng.choice(n_links, int(rng.integers(0, 4)), replace=False)]
                links[i, :len(fwd) + len(rev)] = fwd + rev
                nlinks[i], nfwd[i] = len(fwd) + len(rev), len(fwd)
                ref.add(fwd, rev, float(size[i]), float(back[i]), float(lat[i]), g_ref, tag + i)
            net.add(links, np.ones((m, K)), nlinks, nfwd, size, lat, np.full(m, g), np.arange(tag, tag + m),
                    np.ones(m, dtype=np.int64), np.ones(m, dtype=np.int64), back=back)
            tag += m
        assert got == want and len(got) == len(starts)
        assert net.m_end[:tag].tolist() == [ref.m_end[i] for i in range(tag)]
        assert net.flows == 0 and (net.lcount == 0).all() and (net.head == -1).all()
