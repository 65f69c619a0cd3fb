"""tests/integration/conftest.py skips the integration tests (not root, no Open vSwitch, a fabric up) by their
place inside the repository, never by the checkout's own path (issue 28)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tests.integration import conftest


class Item:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.markers: list = []

    def add_marker(self, marker) -> None:
        self.markers.append(marker)


def test_a_checkout_whose_path_says_integration_skips_only_its_integration_tests(tmp_path, monkeypatch):
    root = tmp_path / "integration" / "checkout"  # e.g. /home/me/integration/zcube
    unit = Item(root / "tests" / "unit" / "emulation" / "test_attach.py")
    helper = Item(root / "tests" / "unit" / "integration_like" / "test_x.py")
    real = Item(root / "tests" / "integration" / "test_run.py")
    monkeypatch.setattr(conftest, "_skip_reason", lambda: "integration tests need root")
    conftest.pytest_collection_modifyitems(SimpleNamespace(rootpath=root), [unit, helper, real])
    assert [m.kwargs["reason"] for m in real.markers] == ["integration tests need root"]
    assert unit.markers == [] and helper.markers == []


def test_nothing_is_asked_when_no_integration_test_was_collected(tmp_path, monkeypatch):
    asked = []
    monkeypatch.setattr(conftest, "_skip_reason", lambda: asked.append(1) or "reason")
    item = Item(tmp_path / "integration" / "tests" / "unit" / "test_x.py")
    conftest.pytest_collection_modifyitems(SimpleNamespace(rootpath=tmp_path / "integration"), [item])
    assert asked == [] and item.markers == []


def test_is_integration_reads_the_path_inside_the_repository(tmp_path):
    assert conftest.is_integration(Item(tmp_path / "tests" / "integration" / "test_fabric.py"), tmp_path)
    assert not conftest.is_integration(Item(tmp_path / "tests" / "unit" / "test_integration.py"), tmp_path)
    assert not conftest.is_integration(Item(Path("/elsewhere/tests/integration/test_x.py")), tmp_path)
