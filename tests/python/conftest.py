"""pytest settings shared by tests/python: the `slow` marker (heavy model
tests; CI still runs them), the fixture of the CUDA training tests, and
ptc.config.compiled_autograd put back after every test that changes it."""
import os
import sys

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: heavy model tests (still run in CI)")


@pytest.fixture(scope="module")
def cuda_compiled_autograd(tmp_path_factory):
    """CUDA training tests: skip without a GPU or the ptc module; a fresh kernel
    cache; compiled autograd on (the default; a test may have turned it off)
    for the module, then as it was."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    ptc = pytest.importorskip("ptc", reason="the ptc Python module is not part of this build")
    os.environ["PTC_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    old = ptc.config.compiled_autograd
    ptc.config.compiled_autograd = True
    yield
    ptc.config.compiled_autograd = old


@pytest.fixture(autouse=True)
def restore_compiled_autograd():
    """A test that turns compiled autograd on or off (and sets it back to a
    value of its own) leaves the next test the default it found."""
    ptc = sys.modules.get("ptc")
    old = ptc.config.compiled_autograd if ptc is not None else None
    yield
    if ptc is not None:
        ptc.config.compiled_autograd = old
