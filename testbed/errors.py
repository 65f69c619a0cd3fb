"""User-facing errors.

Every error a user can cause by bad input is a ``TestbedError``: the CLI prints
its message as one line on stderr and exits with status 2, without a traceback.
Messages name the bad value and the rule it broke.
"""


class TestbedError(Exception):
    """Bad input or an unusable environment, explained in one line."""

    __test__ = False  # not a pytest test class despite the name

    exit_status = 2


class EnvironmentProblem(TestbedError):
    """The machine cannot do what was asked (not root, OVS down, ...)."""

    exit_status = 1
