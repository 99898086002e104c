"""ptc's meta inference against the installed PyTorch.

Regenerates the meta corpus (gen_meta_cases.py) from the torch in use into a
temporary directory and runs every file through `ptc-run --emit=ptir`:
graphs whose types torch produced must verify (exit 0), and calls torch
rejects must fail with a MetaError naming the op (exit 2). When the installed
torch is the one the committed corpus (tests/data/meta) was generated with,
the committed files must also equal the regenerated ones.
"""
import os
import re

import pytest

import gen_meta_cases
import ptcio

SRC = os.environ.get("PTC_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
COMMITTED = os.path.join(SRC, "tests", "data", "meta")


def ptc_run_exe():
    return os.path.join(ptcio.build_dir(), "tools", "run", "ptc-run")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("meta")
    valid, errors, skipped = gen_meta_cases.generate(str(out), SRC)
    assert valid > 1000 and errors > 300, (valid, errors, skipped)
    return str(out)


def ptir_files(d):
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".ptir"))


def test_valid_cases_verify(corpus):
    if not os.path.exists(ptc_run_exe()):
        pytest.skip("ptc-run is not built (it needs the reference interpreter)")
    bad = []
    for path in ptir_files(corpus):
        r = ptcio.ptc_run("--emit=ptir", path)
        if r.returncode != 0:
            bad.append("%s: exit %d: %s" % (os.path.basename(path), r.returncode, r.stderr.strip()))
    assert not bad, "\n".join(bad[:50])


def test_error_cases_fail_naming_the_op(corpus):
    if not os.path.exists(ptc_run_exe()):
        pytest.skip("ptc-run is not built (it needs the reference interpreter)")
    bad = []
    files = ptir_files(os.path.join(corpus, "errors"))
    assert files
    for path in files:
        with open(path) as f:
            op = re.search(r"^# expect: MetaError (\S+)$", f.read(), re.M).group(1)
        r = ptcio.ptc_run("--emit=ptir", path)
        if r.returncode != 2 or "MetaError" not in r.stderr or ("%s: " % op) not in r.stderr:
            bad.append("%s: exit %d: %s" % (os.path.basename(path), r.returncode, r.stderr.strip()))
    assert not bad, "\n".join(bad[:50])


def test_committed_corpus_is_current(corpus):
    with open(os.path.join(COMMITTED, "add.ptir")) as f:
        made_with = re.search(r"from torch (\S+);", f.read()).group(1)
    if made_with != gen_meta_cases.torch.__version__:
        pytest.skip("the committed corpus comes from torch %s, this is torch %s"
                    % (made_with, gen_meta_cases.torch.__version__))

    def listing(d):
        return sorted(os.path.relpath(p, d) for p in
                      ptir_files(d) + ptir_files(os.path.join(d, "errors")))

    assert listing(COMMITTED) == listing(corpus), "regenerate with tests/python/gen_meta_cases.py"
    for rel in listing(corpus):
        with open(os.path.join(COMMITTED, rel)) as a, open(os.path.join(corpus, rel)) as b:
            assert a.read() == b.read(), "%s is stale: regenerate with gen_meta_cases.py" % rel
