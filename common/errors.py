"""User-facing errors.

Every error a user can cause by bad input is a ``TestbedError``: the CLI prints
its message as one line on stderr and exits with status 2, without a traceback.
Messages name the bad value and the rule it broke.
"""


class TestbedError(Exception):
    """Bad input or an unusable environment, explained in one line. ``key``: what the bad input is: the
    parameter it was given as (``gpus_per_switch``), or the experiment's key path (``link.rate``) once
    the experiment's checks placed it; None when no one input is to blame."""

    __test__ = False  # not a pytest test class despite the name

    exit_status = 2

    def __init__(self, message: str = "", key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class EnvironmentProblem(TestbedError):
    """The machine cannot do what was asked (not root, OVS down, ...)."""

    exit_status = 1
