"""pytest settings shared by tests/python: the `slow` marker (heavy model
tests; CI still runs them), and the fixture of the CUDA training tests."""
import os

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: heavy model tests (still run in CI)")


@pytest.fixture(scope="module")
def cuda_compiled_autograd(tmp_path_factory):
    """CUDA training tests: skip without a GPU or the ptc module; a fresh kernel
    cache; compiled autograd on (it is opt-in) for the module, then as it was."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    ptc = pytest.importorskip("ptc", reason="the ptc Python module is not part of this build")
    os.environ["PTC_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    old = ptc.config.compiled_autograd
    ptc.config.compiled_autograd = True
    yield
    ptc.config.compiled_autograd = old
