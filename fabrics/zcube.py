"""ZCube: two switch groups, no spine layer.

For n GPUs with dual-port NICs and k GPUs per switch there are 2n/k switches
numbered 1..2n/k. GPU i's port 1 goes to odd switch ((i-1) mod (n/k))*2+1
(multi-rail), port 2 to even switch ceil(i/k)*2 (single-rail: one server), and
every odd switch is cabled to every even switch.

Each switch has k GPU ports and (n/k)*c fabric ports, where c is the number of
parallel cables per odd-even pair. The fabric is non-blocking when
(n/k)*c == k, so by default c = k^2/n when that is a whole number >= 1, and 1
otherwise; the oversubscription ratio k : (n/k)*c is always reported.
"""

from __future__ import annotations

from common.errors import TestbedError
from fabrics.topology import Fabric, FabricBuilder


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TestbedError(f"{name}={value!r} is invalid: expected a whole number >= 1", key=name.replace("-", "_"))
    return value


def default_cables(n_gpus: int, gpus_per_switch: int) -> int:
    """k^2/n parallel cables when that is an integer >= 1 (non-blocking), else 1."""
    k2 = gpus_per_switch * gpus_per_switch
    return k2 // n_gpus if k2 % n_gpus == 0 and k2 >= n_gpus else 1


# A 51.2 Tbit/s switch as 256 ports of 200G: the largest switch the sizes the project reports are built from
# (the blog's "16,384 dual-port NICs on one layer of 51.2T switches": k = 128, 2 x 128 switches of 256 ports).
SWITCH_PORTS_51T = 256


def scaled_k(n_gpus: int) -> int:
    """The ZCube k a scale study uses for n GPUs (``gpus_per_switch: auto``): the smallest power of two with
    k^2 >= 2n, so the default cables k^2/n are 2 or 4 (non-blocking, a sibling cable per odd-even pair for fast
    failover) and switches have 2k ports: n=32 -> 8 (the default fabric), 128 -> 16, 512 -> 32 (16 + 16 switches
    of 64 ports, 2 cables per pair), 8,192 -> 128. When those 2k ports would not fit one 51.2T switch
    (``SWITCH_PORTS_51T``), the smallest power of two with k^2 >= n instead: one cable per pair, still
    non-blocking, so n=16,384 -> 128 (128 + 128 switches of 256 ports), the blog's formula; beyond that no
    ZCube of 51.2T switches exists (TestbedError)."""
    n = _positive_int("gpus", n_gpus)
    k = 1
    while k * k < 2 * n:
        k *= 2
    if 2 * k > SWITCH_PORTS_51T:
        k = 1
        while k * k < n:
            k *= 2
        if 2 * k > SWITCH_PORTS_51T:
            limit = (SWITCH_PORTS_51T // 2) ** 2
            raise TestbedError(f"gpus={n} needs ZCube switches of {2 * k} ports (k={k}), more than a 51.2T switch's "
                               f"{SWITCH_PORTS_51T}: one layer of them reaches {limit} GPUs (set gpus_per_switch to "
                               "build a larger one)", key="gpus")
    if n % k:
        raise TestbedError(f"gpus={n} is not divisible by the scaled k={k}: expected a multiple of {k}", key="gpus")
    return k


def odd_switch_of(gpu: int, n_gpus: int, gpus_per_switch: int) -> int:
    """Number of the odd switch GPU ``gpu``'s port 1 connects to."""
    return ((gpu - 1) % (n_gpus // gpus_per_switch)) * 2 + 1


def even_switch_of(gpu: int, gpus_per_switch: int) -> int:
    """Number of the even switch GPU ``gpu``'s port 2 connects to: ceil(i/k)*2."""
    return -(-gpu // gpus_per_switch) * 2


def build_zcube(n_gpus: int, gpus_per_switch: int, cables: int | None = None) -> Fabric:
    n = _positive_int("gpus", n_gpus)
    k = _positive_int("gpus-per-switch", gpus_per_switch)
    if n % k:
        raise TestbedError(
            f"gpus={n} is not divisible by gpus-per-switch={k}: ZCube needs n/k whole switches per group", key="gpus"
        )
    groups = n // k  # switches per group; n/k >= 1 holds since n >= k here
    if cables is None:
        c = default_cables(n, k)
    else:
        c = _positive_int("cables", cables)
        if c > k:
            raise TestbedError(
                f"cables={c} leaves links unused: each odd-even cable carries traffic to k={k} "
                f"destination ports picked by destination, so at most {k} cables per pair are used", key="cables"
            )
    b = FabricBuilder()
    radix = k + groups * c
    for j in range(1, 2 * groups + 1):
        b.add_switch(f"sw{j}", dpid=j, role="odd" if j % 2 else "even", radix=radix)
    for i in range(1, n + 1):
        b.connect_gpu(i, 1, f"sw{odd_switch_of(i, n, k)}")
    for i in range(1, n + 1):
        b.connect_gpu(i, 2, f"sw{even_switch_of(i, k)}")
    for odd in range(1, 2 * groups, 2):
        for even in range(2, 2 * groups + 1, 2):
            b.connect_switches(f"sw{odd}", f"sw{even}", c)
    return Fabric(
        kind="zcube",
        n_gpus=n,
        params={"gpus": n, "gpus_per_switch": k, "cables": c},
        switches=b.switches,
        cables=b.cables,
        oversubscription=k / (groups * c),
    )
