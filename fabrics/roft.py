"""Rail-optimized fat-tree (ROFT), the baseline ZCube is compared with.

Servers hold ``gpus_per_server`` GPUs (8 by default); GPU r of every server is
on rail r. Both ports of a GPU's NIC go to a leaf of its rail (the common
single-plane choice: the two ports double the NIC's bandwidth into the same
rail leaf). A leaf uses at most radix/2 ports for NIC ports and has as many
uplinks as used downlinks, spread evenly over a spine layer sized by the
radix; every leaf is cabled to every spine. With ``spines=False`` the same
leaves form a rail-only fabric (no cross-rail path through the network).

At n=32 with radix 16 this is 8 leaves + 4 spines (2 cables per leaf-spine
pair), against ZCube's 8 switches.
"""

from __future__ import annotations

from common.errors import TestbedError
from fabrics.topology import Fabric, FabricBuilder
from fabrics.zcube import _positive_int

LEAF_DPID_BASE = 0x100
SPINE_DPID_BASE = 0x200


def rail_of(gpu: int, gpus_per_server: int) -> int:
    """Rail (1-based) of a GPU: its local rank in its server, plus one."""
    return (gpu - 1) % gpus_per_server + 1


def server_of(gpu: int, gpus_per_server: int) -> int:
    return -(-gpu // gpus_per_server)


def roft_shape(n_gpus: int, gpus_per_server: int, radix: int) -> dict:
    """Leaf and spine counts for the given size, validated."""
    n = _positive_int("gpus", n_gpus)
    s = _positive_int("gpus-per-server", gpus_per_server)
    r = _positive_int("radix", radix)
    if n % s:
        raise TestbedError(
            f"gpus={n} does not fill servers of gpus-per-server={s}: expected a multiple of {s}", key="gpus"
        )
    if r < 2 or r % 2:
        raise TestbedError(f"radix={r} is invalid: expected an even number >= 2 (half down, half up)", key="radix")
    servers = n // s
    nic_ports_per_rail = 2 * servers
    down_max = r // 2
    leaves_per_rail = -(-nic_ports_per_rail // down_max)
    # Fill leaves evenly; a leaf must take both ports of a GPU.
    gpus_per_leaf = -(-servers // leaves_per_rail)
    leaves_per_rail = -(-servers // gpus_per_leaf)
    down = 2 * gpus_per_leaf
    leaves = s * leaves_per_rail
    if leaves > r:
        raise TestbedError(
            f"gpus={n} needs {leaves} leaves but a spine of radix={r} reaches at most {r}: "
            "a two-tier ROFT this large needs a bigger radix", key="gpus"
        )
    # fewest spines that take every uplink and split each leaf's uplinks evenly
    spines = next(sp for sp in range(-(-(leaves * down) // r), down + 1) if down % sp == 0)
    return {
        "servers": servers,
        "leaves_per_rail": leaves_per_rail,
        "gpus_per_leaf": gpus_per_leaf,
        "leaves": leaves,
        "spines": spines,
        "cables_per_leaf_spine": down // spines,
        "downlinks_per_leaf": down,
    }


def build_roft(
    n_gpus: int, gpus_per_server: int = 8, radix: int = 16, spines: bool = True
) -> Fabric:
    shape = roft_shape(n_gpus, gpus_per_server, radix)
    s = gpus_per_server
    b = FabricBuilder()
    leaves_per_rail, per_leaf = shape["leaves_per_rail"], shape["gpus_per_leaf"]
    for j in range(1, shape["leaves"] + 1):
        b.add_switch(f"leaf{j}", LEAF_DPID_BASE + j, "leaf", radix)
    n_spines = shape["spines"] if spines else 0
    for j in range(1, n_spines + 1):
        b.add_switch(f"spine{j}", SPINE_DPID_BASE + j, "spine", radix)

    def leaf_of(gpu: int) -> str:
        rail = rail_of(gpu, s)
        slot = (server_of(gpu, s) - 1) // per_leaf
        return f"leaf{(rail - 1) * leaves_per_rail + slot + 1}"

    for i in range(1, n_gpus + 1):  # both ports of a NIC on adjacent leaf ports
        b.connect_gpu(i, 1, leaf_of(i))
        b.connect_gpu(i, 2, leaf_of(i))
    for leaf in range(1, shape["leaves"] + 1):
        for spine in range(1, n_spines + 1):
            b.connect_switches(f"leaf{leaf}", f"spine{spine}", shape["cables_per_leaf_spine"])
    params = {"gpus": n_gpus, "gpus_per_server": s, "radix": radix}
    if not spines:
        params["spines"] = False
    return Fabric(
        kind="roft" if spines else "railonly",
        n_gpus=n_gpus,
        params=params,
        switches=b.switches,
        cables=b.cables,
        oversubscription=1.0 if spines else float("inf"),
    )
