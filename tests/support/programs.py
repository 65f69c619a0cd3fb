"""Every switch's program at once (the controller builds them one switch at a time)."""

from __future__ import annotations

from controller.rules import Dead, SwitchProgram, switch_program
from fabrics import Fabric
from fabrics.routing import forwarding_tables


def fabric_programs(fabric: Fabric, dead: Dead | None = None) -> dict[str, SwitchProgram]:
    """Every switch's program, from one routing computation (``dead``: the repaired programs)."""
    tables = forwarding_tables(fabric)
    return {name: switch_program(fabric, name, tables, dead) for name in fabric.switches}
