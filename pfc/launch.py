"""How the pause daemon is started and recognised: its command line, one spelling for the controller that
starts it, a host of a multi-host fabric that starts its own, and ``clean`` that must know it for ours."""

from __future__ import annotations

from pathlib import Path

from pfc.files import POLICY_FILE


def pfcd_args(state_dir: str | Path, lifeline_fd: int | None = None) -> list[str]:
    """pfcd's arguments after the interpreter: the policy in ``state_dir``, and the lifeline it watches."""
    args = ["-m", "pfc.pfcd", "--policy", str(Path(state_dir) / POLICY_FILE)]
    return args + ["--lifeline-fd", str(lifeline_fd)] if lifeline_fd is not None else args


def is_pfcd(argv: tuple[str, ...] | list[str], state_dir: str | Path) -> bool:
    """Whether a command line is exactly one ``pfcd_args`` gives for ``state_dir`` (any lifeline fd number):
    a process whose arguments only contain the module and the policy path is not the pause daemon."""
    if len(argv) < 2 or not Path(argv[0]).name.startswith("python"):
        return False
    args = list(argv[1:])
    plain = pfcd_args(state_dir)
    return args == plain or (len(args) == len(plain) + 2 and args[:-1] == plain + ["--lifeline-fd"]
                             and args[-1].isdigit())
