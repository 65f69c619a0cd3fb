"""traffic.runtime.ports: a connection's source port is drawn from the seed and the address pair (the ns-3 twin's
rule): the same seed gives the same ports, another seed others, a clash takes the next free port."""

from __future__ import annotations

from traffic.runtime.ports import EPHEMERAL, source_port

PAIRS = [(f"10.1.0.{a}", f"10.2.0.{b}") for a in range(1, 9) for b in range(17, 25)]


def draw(seed):
    used: set = set()
    return [source_port(seed, s, d, used) for s, d in PAIRS]


def test_a_seed_gives_the_same_ports_and_another_seed_others():
    a, again, b = draw(3), draw(3), draw(4)
    assert a == again and a != b
    assert all(EPHEMERAL[0] <= p <= EPHEMERAL[1] for p in a + b)
    assert sum(x != y for x, y in zip(a, b)) > len(PAIRS) * 0.9


def test_a_clash_takes_the_next_free_port_of_that_address():
    used: set = set()
    first = source_port(7, "10.1.0.1", "10.2.0.17", used)
    second = source_port(7, "10.1.0.1", "10.2.0.17", used)  # the pair's next connection (after a dead one)
    assert second == (first + 1 if first < EPHEMERAL[1] else EPHEMERAL[0])
    assert ("10.1.0.1", first) in used and ("10.1.0.1", second) in used


def test_the_draw_is_the_twins():
    """Pinned values: the rule is random.Random(f"{seed}|{src}|{dst}").randint over Linux's ephemeral range."""
    import random

    assert source_port(0, "10.1.0.1", "10.2.0.17", set()) == random.Random("0|10.1.0.1|10.2.0.17").randint(*EPHEMERAL)
