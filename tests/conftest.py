"""Shared helpers: the repository root and a kernel session per test module."""

from __future__ import annotations

from pathlib import Path

import pytest

from coursekit.kernel.session import KernelSession

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def kernel():
    session = KernelSession()
    yield session
    session.close()


def pytest_collection_modifyitems(config, items):
    """Notebook cells collected by nbval belong to the full tier, and each notebook runs on
    one xdist worker (its cells share a kernel)."""
    for item in items:
        if type(item).__name__ == "IPyNbCell":
            item.add_marker(pytest.mark.full)
