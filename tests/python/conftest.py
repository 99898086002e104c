"""pytest settings shared by tests/python: the `slow` marker (heavy model
tests; CI still runs them)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: heavy model tests (still run in CI)")
