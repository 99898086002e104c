"""`ptc-run --backend cpu --check` on every .ptir file of the repository.

Every graph of every file that verifies (files written to exercise the parser
or the meta functions' errors are skipped) is compiled by the CPU backend and
compared with the reference interpreter; a second run must find every kernel
in the disk cache (`--stats` reports 0 compiled). Files with symbolic sizes
run again with other symbol values.
"""
import glob
import os
import re
import tempfile

import pytest

from ptcio import ptc_run

SRC = os.environ.get("PTC_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
PATTERNS = ["examples/*.ptir", "tests/golden/*.ptir", "tests/lower/*.ptir", "tests/data/*/*.ptir"]
FILES = sorted(f for p in PATTERNS for f in glob.glob(os.path.join(SRC, p)))


@pytest.fixture(scope="module")
def cache():
    with tempfile.TemporaryDirectory() as d:
        old = os.environ.get("PTC_CACHE_DIR")
        os.environ["PTC_CACHE_DIR"] = d
        yield d
        if old is None:
            del os.environ["PTC_CACHE_DIR"]
        else:
            os.environ["PTC_CACHE_DIR"] = old


def test_found_files():
    assert len(FILES) > 50, FILES


@pytest.mark.parametrize("path", FILES, ids=[os.path.relpath(f, SRC) for f in FILES])
def test_cpu_matches_reference(cache, path):
    if ptc_run("--emit=ptir", path).returncode != 0:
        pytest.skip("does not verify (a parser or meta test case)")
    r = ptc_run("--backend", "cpu", "--check", "--all", path, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    second = ptc_run("--backend", "cpu", "--check", "--stats", "--all", path, timeout=600)
    assert second.returncode == 0, second.stderr
    compiled = [int(n) for n in re.findall(r"kernels: (\d+) compiled", second.stdout)]
    assert compiled and all(n == 0 for n in compiled), second.stdout[-2000:]
    with open(path) as f:
        syms = sorted(set(re.findall(r"\b(s\d+)\b", f.read())))
    for value in (1, 7):
        args = [a for s in syms for a in ("--sym", "%s=%d" % (s, value))]
        if args:
            r = ptc_run("--backend", "cpu", "--check", "--all", *args, path, timeout=600)
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr
