"""Integration fixtures: real Open vSwitch, real namespaces, the real controller.

Skipped (with the reason) when not root or when Open vSwitch is not running,
and when a fabric is already up on this machine (we do not touch it).
One fabric exists at a time: ``fabric`` is module-scoped and parametrized
indirectly, so pytest groups the tests of one fabric and tears it down
before the next comes up.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.integration import leftovers, run_testbed


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "integration tests need root (namespaces, Open vSwitch): run them with sudo"
    if subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True).returncode:
        return "Open vSwitch is not running (scripts/setup.sh starts it)"
    from testbed.emulation import fabricctl

    if fabricctl.load_state() is not None:
        return (f"a fabric is already up ({fabricctl.state_file()}); integration tests leave it alone "
                "(left by a crash? 'sudo .venv/bin/python -m testbed clean'; .ci/run cleans first and fails "
                "when no integration test ran)")
    return None


def is_integration(item, root: Path) -> bool:
    """A test under tests/integration/ of this repository: its location inside the repository, never the
    checkout's own path (a checkout in /home/me/integration/ must not skip its unit tests)."""
    try:
        parts = Path(item.path).resolve().relative_to(root.resolve()).parts
    except ValueError:
        return False
    return parts[:2] == ("tests", "integration")


def pytest_collection_modifyitems(config, items):
    ours = [item for item in items if is_integration(item, config.rootpath)]
    reason = _skip_reason() if ours else None
    if reason:
        for item in ours:
            item.add_marker(pytest.mark.skip(reason=reason))


FABRICS = {
    "zcube16": {"kind": "zcube", "gpus": 16, "gpus_per_switch": 8},
    "roft16": {"kind": "roft", "gpus": 16},
    "zcube32": {"kind": "zcube", "gpus": 32, "gpus_per_switch": 8},
    "roft32": {"kind": "roft", "gpus": 32},
}


@pytest.fixture(scope="module")
def fabric(request):
    """A fabric brought up with ``testbed up`` (the CLI), torn down with ``down``."""
    from testbed.emulation import fabricctl

    spec = FABRICS[request.param]
    args = ["up", spec["kind"], "--gpus", str(spec["gpus"])]
    if "gpus_per_switch" in spec:
        args += ["--gpus-per-switch", str(spec["gpus_per_switch"])]
    proc = run_testbed(*args)
    assert proc.returncode == 0, f"testbed {' '.join(args)}: {proc.stderr.strip()}"
    st = fabricctl.load_state()
    try:
        yield st
    finally:
        down = run_testbed("down")
        assert down.returncode == 0, down.stderr
        assert leftovers() == []


@pytest.fixture(autouse=True)
def no_fabric_left_behind(request):
    """A test that leaves a fabric up fails itself, and the fabric is swept so the next tests
    do not fail for it (a module's ``fabric`` fixture owns its fabric until the module ends)."""
    yield
    if "fabric" in request.fixturenames:
        return
    from testbed.emulation import fabricctl

    if fabricctl.load_state() is not None:
        swept = run_testbed("clean")
        pytest.fail(f"this test left a fabric up ('testbed clean' swept it: rc {swept.returncode})")


@pytest.fixture(scope="module")
def two_pseudo_hosts():
    """Two pseudo-hosts for one test module; their hosts file's path. Cleaned (``clean --hosts``) and taken
    down after it, leaving nothing; skipped when pseudo-hosts are already up (a user's: left alone)."""
    from testbed.emulation.hosts import pseudo

    if pseudo.load_state() is not None or pseudo.existing_netns():
        pytest.skip("pseudo-hosts are already up on this machine; these tests leave them alone")
    proc = run_testbed("hosts", "pseudo", "up", "--count", "2")
    assert proc.returncode == 0, proc.stderr
    try:
        yield str(pseudo.hosts_path())
    finally:
        run_testbed("clean", "--hosts", str(pseudo.hosts_path()), timeout=300)
        down = run_testbed("hosts", "pseudo", "down")
        assert down.returncode == 0, down.stderr + down.stdout
        assert pseudo.leftovers() == []
