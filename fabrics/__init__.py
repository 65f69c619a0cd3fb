"""Pure-Python fabric models: wiring, addresses, routing and cost. No root needed."""

from __future__ import annotations

from common.errors import TestbedError
from fabrics.roft import build_roft
from fabrics.topology import Fabric
from fabrics.zcube import build_zcube

FABRICS = ("zcube", "roft", "railonly")


def build_fabric(
    kind: str,
    gpus: int = 32,
    gpus_per_switch: int = 8,
    cables: int | None = None,
    gpus_per_server: int = 8,
    radix: int | None = None,
) -> Fabric:
    """Build a fabric by name. ROFT's radix defaults to that of the ZCube of the
    same n and k, so both are compared with switches of the same size."""
    if kind == "zcube":
        return build_zcube(gpus, gpus_per_switch, cables)
    if kind in ("roft", "railonly"):
        if radix is None:
            z = build_zcube(gpus, gpus_per_switch, cables)
            radix = next(iter(z.switches.values())).radix
        return build_roft(gpus, gpus_per_server, radix, spines=(kind == "roft"))
    raise TestbedError(f"fabric {kind!r} is unknown: expected one of {', '.join(FABRICS)}")


def fabric_args(kind: str, gpus: int, gpus_per_switch: int, cables: int | None, gpus_per_server: int,
                radix: int | None) -> dict:
    """The ``build_fabric`` / ``fabricctl.up`` keywords of ``kind``: only those that shape it (ZCube: k and
    cables; ROFT: server size and radix, k for its default radix), so run records name no unused knob."""
    if kind == "zcube":
        return {"kind": kind, "gpus": gpus, "gpus_per_switch": gpus_per_switch, "cables": cables}
    return {"kind": kind, "gpus": gpus, "gpus_per_switch": gpus_per_switch, "gpus_per_server": gpus_per_server,
            "radix": radix}


__all__ = ["Fabric", "FABRICS", "build_fabric", "fabric_args"]
