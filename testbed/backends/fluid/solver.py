"""The flow-level network: weighted max-min fair rates over link capacities, recomputed at every arrival and
departure, and the event loop that drains the flows (compiled with numba; docs/fluid.md says why not SimGrid
or plain numpy).

A flow crosses links with a coefficient each (1 for a message's bytes; the solver takes any weights), so a link
carries sum(coefficient x rate) over its flows. The rates are the weighted max-min fair allocation (progressive
filling: raise every unfrozen flow's rate together until a link is full, freeze the flows crossing a full link,
repeat). A message flows on its forward path; when its last byte has left, its acknowledgements (the receiver's
ack and TCP's delayed ACKs) flow back on its reverse path as a flow of their own, which nobody waits for. A
message is delivered its path's latency after its last byte left; a *group* (an expert-parallel phase, a KV slice)
is done when its last message is delivered, and ``Network.advance`` hands the done groups back in time order.

Same-instant batching: flows added at one instant are one event (the rates are solved once, at the next
``advance``), and flows whose last byte leaves within ``batch_s`` of the earliest one depart together.
"""

from __future__ import annotations

import numba as nb
import numpy as np

EMPTY = 1e-12  # a weight sum under this is no flow


@nb.njit(cache=True)
def _push(hk, hi, size, key, item):
    """Push (key, item) on the binary min-heap ``hk``/``hi`` of ``size`` entries; the new size."""
    j = size
    while j > 0:
        parent = (j - 1) >> 1
        if hk[parent] <= key:
            break
        hk[j], hi[j] = hk[parent], hi[parent]
        j = parent
    hk[j], hi[j] = key, item
    return size + 1


@nb.njit(cache=True)
def _pop(hk, hi, size):
    """Remove the heap's least entry (index 0); the new size."""
    size -= 1
    key, item = hk[size], hi[size]
    j = 0
    while True:
        a = 2 * j + 1
        if a >= size:
            break
        if a + 1 < size and hk[a + 1] < hk[a]:
            a += 1
        if hk[a] >= key:
            break
        hk[j], hi[j] = hk[a], hi[a]
        j = a
    hk[j], hi[j] = key, item
    return size


@nb.njit(cache=True)
def maxmin(n, links, coefs, nlinks, cap, rate, mark, used, frozen):
    """Weighted max-min fair rates of flows 0..n-1 into ``rate``; ``links``/``coefs``/``nlinks``: each flow's links
    and coefficients; ``cap``: each link's capacity. Progressive filling in the order the links fill: a heap of
    links keyed by the level at which each fills. Raising every unfrozen flow together keeps those levels; a frozen
    flow only raises its other links' levels, so a popped key is checked against its link's level now and pushed
    again if it rose (keys never fall). ``mark`` (links, all -1 on entry and on return), ``used`` (links) and
    ``frozen`` (flows) are scratch. Returns (links used, links filled): ``used[:links used]`` lists the links the
    flows cross."""
    return maxmin_of(np.arange(n), n, links, coefs, nlinks, cap, rate, mark, used, frozen)


@nb.njit(cache=True)
def maxmin_of(idx, n, links, coefs, nlinks, cap, rate, mark, used, frozen):
    """``maxmin`` of the flows ``idx[:n]`` alone (the others' rates untouched): exact when no other flow shares a
    link with them, i.e. they are whole connected components of the flows-and-links graph."""
    nused = 0
    nnz = 0
    for q in range(n):
        f = idx[q]
        frozen[f] = False
        rate[f] = 0.0
        nnz += nlinks[f]
        for k in range(nlinks[f]):
            lk = links[f, k]
            if mark[lk] < 0:
                mark[lk] = nused
                used[nused] = lk
                nused += 1
    wsum = np.zeros(nused)
    left = np.empty(nused)  # capacity left at level ``upd``
    upd = np.zeros(nused)
    ptr = np.zeros(nused + 1, dtype=np.int64)
    for i in range(nused):
        left[i] = cap[used[i]]
    for q in range(n):
        f = idx[q]
        for k in range(nlinks[f]):
            i = mark[links[f, k]]
            wsum[i] += coefs[f, k]
            ptr[i + 1] += 1
    for i in range(nused):
        ptr[i + 1] += ptr[i]
    members = np.empty(nnz, dtype=np.int64)
    fill = ptr[:nused].copy()
    for q in range(n):
        f = idx[q]
        for k in range(nlinks[f]):
            i = mark[links[f, k]]
            members[fill[i]] = f
            fill[i] += 1
    hk = np.empty(nused)
    hi = np.empty(nused, dtype=np.int64)
    size = 0
    for i in range(nused):
        if wsum[i] > EMPTY:
            size = _push(hk, hi, size, left[i] / wsum[i], i)
    unfrozen = n
    filled = 0
    while unfrozen > 0 and size > 0:
        key, i = hk[0], hi[0]
        size = _pop(hk, hi, size)
        if wsum[i] <= EMPTY:
            continue
        now = upd[i] + max(left[i], 0.0) / wsum[i]  # the level at which link i fills, now
        if now > key:
            size = _push(hk, hi, size, now, i)
            continue
        level = key
        filled += 1
        for m in range(ptr[i], ptr[i + 1]):
            f = members[m]
            if frozen[f]:
                continue
            frozen[f] = True
            rate[f] = level
            unfrozen -= 1
            for k in range(nlinks[f]):
                j = mark[links[f, k]]
                left[j] -= (level - upd[j]) * wsum[j]
                upd[j] = level
                wsum[j] -= coefs[f, k]
        wsum[i] = 0.0
    for i in range(nused):
        mark[used[i]] = -1
    return nused, filled


@nb.njit(cache=True)
def _seed(lk, seed, isseed, cnt):
    """Note link ``lk`` as touched by an event (its flows' rates are solved again)."""
    if not isseed[lk]:
        isseed[lk] = True
        seed[cnt[3]] = lk
        cnt[3] += 1


# The link-to-flow index, kept across events: every link's flows as a doubly linked list of entries (entry
# f * K + k: flow f's k-th link), and the links some flow crosses as a list (``lused``, ``lpos``: where a link
# stands in it). An arrival or a departure updates only its own links, so an event no longer rebuilds the index
# of every flow.


@nb.njit(cache=True)
def _index_add(f, K, links, nlinks, head, nxt, prv, lcount, lused, lpos, cnt, seed, isseed):
    """Enter flow ``f``'s links in the index and note them touched."""
    for k in range(nlinks[f]):
        e = f * K + k
        lk = links[f, k]
        h = head[lk]
        nxt[e], prv[e] = h, -1
        if h >= 0:
            prv[h] = e
        head[lk] = e
        lcount[lk] += 1
        if lcount[lk] == 1:
            lpos[lk] = cnt[2]
            lused[cnt[2]] = lk
            cnt[2] += 1
        _seed(lk, seed, isseed, cnt)


@nb.njit(cache=True)
def _index_drop(f, K, links, nlinks, head, nxt, prv, lcount, lused, lpos, cnt):
    """Take flow ``f``'s links out of the index."""
    for k in range(nlinks[f]):
        e = f * K + k
        lk = links[f, k]
        a, b = prv[e], nxt[e]
        if a >= 0:
            nxt[a] = b
        else:
            head[lk] = b
        if b >= 0:
            prv[b] = a
        lcount[lk] -= 1
        if lcount[lk] == 0:
            last = cnt[2] - 1
            moved = lused[last]
            lused[lpos[lk]] = moved
            lpos[moved] = lpos[lk]
            cnt[2] = last


@nb.njit(cache=True)
def _index_move(src, dst, K, links, nlinks, head, nxt, prv):
    """Flow ``src``'s entries become flow ``dst``'s (the flow moved in the arrays)."""
    for k in range(nlinks[src]):
        e, d = src * K + k, dst * K + k
        a, b = prv[e], nxt[e]
        prv[d], nxt[d] = a, b
        if a >= 0:
            nxt[a] = d
        else:
            head[links[src, k]] = d
        if b >= 0:
            prv[b] = d


@nb.njit(cache=True)
def _touched(n, K, links, nlinks, head, nxt, lcount, seed, isseed, cnt, lseen, lqueue, insub, sub):
    """The flows whose rates an event can change: the connected components (flows sharing links, transitively) of
    the links touched since the last solve (``seed``: the links of the flows that left or arrived), in flow order
    (the order the whole-fabric solve takes them in). Clears the seeds. Returns how many flows ``sub`` holds."""
    tail = 0
    for q in range(cnt[3]):
        lk = seed[q]
        isseed[lk] = False
        if lcount[lk] > 0 and not lseen[lk]:
            lseen[lk] = True
            lqueue[tail] = lk
            tail += 1
    cnt[3] = 0
    head_q = 0
    m = 0
    while head_q < tail:
        lk = lqueue[head_q]
        head_q += 1
        e = head[lk]
        while e >= 0:
            f = e // K
            e = nxt[e]
            if insub[f]:
                continue
            insub[f] = True
            sub[m] = f
            m += 1
            for k in range(nlinks[f]):
                x = links[f, k]
                if not lseen[x]:
                    lseen[x] = True
                    lqueue[tail] = x
                    tail += 1
    for q in range(tail):
        lseen[lqueue[q]] = False
    if m * 16 < n:  # a small component: sort it; a large one: read the flags in flow order
        sub[:m].sort()
        for q in range(m):
            insub[sub[q]] = False
    else:
        q = 0
        for f in range(n):
            if insub[f]:
                insub[f] = False
                sub[q] = f
                q += 1
    return m


@nb.njit(cache=True)
def _step(cnt, st, links, coefs, nlinks, nfwd, nall, back, rem, rate, lat, group, tag, pkf, pkr, cap, load, nbytes,
          npk, g_left, g_end, g_last, p_group, p_time, m_end, mark, used, frozen, seed, isseed, head, nxt, prv, lcount,
          lused, lpos, lseen, lqueue, insub, sub, t_stop, batch_s):
    """Run from ``st[0]`` until ``t_stop`` or the first group done; (1, group, time) or (0, -1, t_stop).

    ``cnt``: flows, pending done groups, links the flows cross (listed in ``lused``), links touched since the last
    solve (listed in ``seed``), flows in the link-to-flow index (the ones after it were added since). ``st``: now,
    rates stale (1.0), solves, filling rounds. A solve covers only the flows an event touched (``_touched``): the
    other components' rates stand."""
    K = links.shape[1]
    while True:
        n = cnt[0]
        now = st[0]
        for f in range(cnt[4], n):
            _index_add(f, K, links, nlinks, head, nxt, prv, lcount, lused, lpos, cnt, seed, isseed)
        cnt[4] = n
        if st[1] != 0.0:
            for q in range(cnt[3]):  # links left by departed flows carry nothing unless a flow still crosses them
                load[seed[q]] = 0.0
            m = _touched(n, K, links, nlinks, head, nxt, lcount, seed, isseed, cnt, lseen, lqueue, insub, sub)
            for q in range(m):
                f = sub[q]
                for k in range(nlinks[f]):
                    load[links[f, k]] = 0.0
            nused, rounds = maxmin_of(sub, m, links, coefs, nlinks, cap, rate, mark, used, frozen)
            for q in range(m):
                f = sub[q]
                for k in range(nlinks[f]):
                    load[links[f, k]] += coefs[f, k] * rate[f]
            st[1] = 0.0
            st[2] += 1.0
            st[3] += rounds
        t_drain = np.inf
        for f in range(n):
            if rate[f] > 0.0:
                t = now + rem[f] / rate[f]
                if t < t_drain:
                    t_drain = t
        t_done = np.inf
        j = -1
        for i in range(cnt[1]):
            if p_time[i] < t_done or (p_time[i] == t_done and p_group[i] < p_group[j]):
                t_done = p_time[i]
                j = i
        t_next = min(t_drain, t_done, t_stop)
        dt = t_next - now
        if dt > 0.0:
            for f in range(n):
                rem[f] -= rate[f] * dt
            for i in range(cnt[2]):
                nbytes[lused[i]] += load[lused[i]] * dt
        st[0] = t_next
        if j >= 0 and t_done <= t_drain and t_done <= t_stop:
            g = p_group[j]
            last = cnt[1] - 1
            p_group[j] = p_group[last]
            p_time[j] = p_time[last]
            cnt[1] = last
            return 1, g, t_done
        if t_drain > t_stop:
            return 0, -1, t_stop
        f = 0
        while f < n:
            if rem[f] <= rate[f] * batch_s or rem[f] <= 0.0:
                if rem[f] > 0.0:  # departs a little early: its last bytes count now
                    for k in range(nlinks[f]):
                        nbytes[links[f, k]] += coefs[f, k] * rem[f]
                for k in range(nlinks[f]):
                    npk[links[f, k]] += pkf[f]
                g = group[f]
                if g >= 0:  # a message (not acknowledgements): delivered after its path's latency
                    d = t_next + lat[f]
                    m_end[tag[f]] = d
                    g_left[g] -= 1
                    if d > g_end[g] or (d == g_end[g] and tag[f] > g_last[g]):
                        g_end[g] = d
                        g_last[g] = tag[f]
                    if g_left[g] == 0:
                        p_group[cnt[1]] = g
                        p_time[cnt[1]] = g_end[g]
                        cnt[1] += 1
                _index_drop(f, K, links, nlinks, head, nxt, prv, lcount, lused, lpos, cnt)
                for k in range(nlinks[f]):
                    _seed(links[f, k], seed, isseed, cnt)
                if nall[f] > nlinks[f] and back[f] > 0.0:  # its acknowledgements flow back from now on
                    m, r = nlinks[f], nall[f] - nlinks[f]
                    for k in range(r):
                        links[f, k] = links[f, m + k]
                        coefs[f, k] = 1.0
                    nlinks[f], nall[f], nfwd[f] = r, r, r
                    rem[f], back[f], rate[f], group[f], pkf[f] = back[f], 0.0, 0.0, -1, pkr[f]
                    _index_add(f, K, links, nlinks, head, nxt, prv, lcount, lused, lpos, cnt, seed, isseed)
                    f += 1
                    continue
                last = n - 1
                if f != last:
                    _index_move(last, f, K, links, nlinks, head, nxt, prv)
                    for k in range(nall[last]):
                        links[f, k] = links[last, k]
                        coefs[f, k] = coefs[last, k]
                    nlinks[f] = nlinks[last]
                    nfwd[f] = nfwd[last]
                    nall[f] = nall[last]
                    back[f] = back[last]
                    rem[f] = rem[last]
                    rate[f] = rate[last]
                    lat[f] = lat[last]
                    group[f] = group[last]
                    tag[f] = tag[last]
                    pkf[f] = pkf[last]
                    pkr[f] = pkr[last]
                n -= 1
            else:
                f += 1
        cnt[0] = n
        cnt[4] = n
        st[1] = 1.0


def _grown(a: np.ndarray, size: int, fill=0) -> np.ndarray:
    """``a`` with its first axis at least ``size`` (doubling), new entries ``fill``."""
    if len(a) >= size:
        return a
    new = np.full((max(size, 2 * len(a)),) + a.shape[1:], fill, dtype=a.dtype)
    new[:len(a)] = a
    return new


class Network:
    """The flows on a fabric's links: add them (``add``), run until a group is done (``advance``).

    Units are the caller's: capacities in bytes per second of its clock, sizes in bytes, times in seconds."""

    def __init__(self, capacity: np.ndarray, max_links: int, batch_s: float = 0.0) -> None:
        n_links = len(capacity)
        self.K = max_links
        self.batch_s = float(batch_s)
        self.cap = np.asarray(capacity, dtype=np.float64)
        self.load = np.zeros(n_links)
        self.nbytes = np.zeros(n_links)
        self.npk = np.zeros(n_links, dtype=np.int64)
        self.mark = np.full(n_links, -1, dtype=np.int64)
        self.used = np.zeros(n_links, dtype=np.int64)
        self.seed = np.zeros(n_links, dtype=np.int64)
        self.isseed = np.zeros(n_links, dtype=np.bool_)
        self.head = np.full(n_links, -1, dtype=np.int64)
        self.lcount = np.zeros(n_links, dtype=np.int64)
        self.lused = np.zeros(n_links, dtype=np.int64)
        self.lpos = np.zeros(n_links, dtype=np.int64)
        self.lseen = np.zeros(n_links, dtype=np.bool_)
        self.lqueue = np.zeros(n_links, dtype=np.int64)
        self.cnt = np.zeros(5, dtype=np.int64)
        self.st = np.zeros(4)
        self._flows(256)
        self.g_left = np.zeros(1024, dtype=np.int64)
        self.g_end = np.zeros(1024)
        self.g_last = np.full(1024, -1, dtype=np.int64)
        self.p_group = np.zeros(1024, dtype=np.int64)
        self.p_time = np.zeros(1024)
        self.m_end = np.full(1024, np.nan)
        self.groups = 0

    def _flows(self, size: int) -> None:
        if hasattr(self, "rem") and len(self.rem) >= size:
            return
        size = max(size, 2 * len(getattr(self, "rem", ())))
        self.links = _grown(getattr(self, "links", np.zeros((0, self.K), dtype=np.int64)), size)
        self.coefs = _grown(getattr(self, "coefs", np.zeros((0, self.K))), size)
        self.nxt = _grown(getattr(self, "nxt", np.zeros(0, dtype=np.int64)), size * self.K, -1)
        self.prv = _grown(getattr(self, "prv", np.zeros(0, dtype=np.int64)), size * self.K, -1)
        for name, dtype in (("nlinks", np.int64), ("nfwd", np.int64), ("nall", np.int64), ("back", np.float64),
                            ("rem", np.float64), ("rate", np.float64),
                            ("lat", np.float64), ("group", np.int64), ("tag", np.int64), ("pkf", np.int64),
                            ("pkr", np.int64), ("frozen", np.bool_), ("insub", np.bool_),
                            ("sub", np.int64)):
            setattr(self, name, _grown(getattr(self, name, np.zeros(0, dtype=dtype)), size))

    @property
    def now(self) -> float:
        return float(self.st[0])

    @property
    def flows(self) -> int:
        return int(self.cnt[0])

    @property
    def solves(self) -> int:
        return int(self.st[2])

    @property
    def rounds(self) -> int:
        return int(self.st[3])

    def new_group(self, size: int) -> int:
        """A group of ``size`` flows (added next); its id."""
        g = self.groups
        self.groups += 1
        if g >= len(self.g_left):
            self.g_left = _grown(self.g_left, g + 1)
            self.g_end = _grown(self.g_end, g + 1)
            self.g_last = _grown(self.g_last, g + 1, -1)
            self.p_group = _grown(self.p_group, g + 1)
            self.p_time = _grown(self.p_time, g + 1)
        self.g_left[g] = size
        self.g_end[g] = -np.inf
        self.g_last[g] = -1
        return g

    def add(self, links: np.ndarray, coefs: np.ndarray, nlinks: np.ndarray, nfwd: np.ndarray, nbytes: np.ndarray,
            lat: np.ndarray, group: np.ndarray, tag: np.ndarray, pkf: np.ndarray, pkr: np.ndarray,
            back: np.ndarray | None = None) -> None:
        """Messages starting now: their links and coefficients ([flows, max_links]: the forward path's ``nfwd``
        links, then the reverse path's up to ``nlinks``), wire bytes, latency after the last byte, group, tag (an
        index into ``m_end``, the delivery times), packets forward and back (the links' packet counters) and the
        bytes of their acknowledgements (None: none), which flow back once the message has left."""
        m = len(nbytes)
        if m == 0:
            return
        n = self.flows
        self._flows(n + m)
        self.m_end = _grown(self.m_end, int(tag.max()) + 1, np.nan)
        s = slice(n, n + m)
        self.links[s], self.coefs[s], self.nlinks[s], self.nfwd[s], self.nall[s] = links, coefs, nfwd, nfwd, nlinks
        self.back[s] = 0.0 if back is None else back
        self.rem[s], self.rate[s], self.lat[s], self.group[s], self.tag[s] = nbytes, 0.0, lat, group, tag
        self.pkf[s], self.pkr[s] = pkf, pkr
        self.cnt[0] = n + m
        self.st[1] = 1.0

    def advance(self, t_stop: float) -> tuple[int, float] | None:
        """Run until ``t_stop`` (None) or the first group delivered before it: (group, time)."""
        code, g, t = _step(self.cnt, self.st, self.links, self.coefs, self.nlinks, self.nfwd, self.nall, self.back,
                           self.rem, self.rate,
                           self.lat, self.group, self.tag, self.pkf, self.pkr, self.cap, self.load, self.nbytes,
                           self.npk, self.g_left, self.g_end, self.g_last, self.p_group, self.p_time, self.m_end,
                           self.mark, self.used, self.frozen, self.seed, self.isseed, self.head, self.nxt, self.prv,
                           self.lcount, self.lused, self.lpos, self.lseen, self.lqueue, self.insub, self.sub,
                           float(t_stop), self.batch_s)
        return (int(g), float(t)) if code else None

    def last_of(self, group: int) -> int:
        """The tag delivered last in a done group (of equal times, the highest)."""
        return int(self.g_last[group])


__all__ = ["maxmin", "maxmin_of", "Network"]
