"""One compiled CUDA program serves every size.

The symbolic corpus (tests/data/dynamic) runs through `ptc-run --backend cuda
--check` for sizes from empty to long rows with one compile, every run
checked against the reference interpreter. Kernels whose team depends on a
symbolic size are compiled in several forms and the run picks one per call:
a softmax over a row of s0 elements runs a thread per row for tiny rows, a
warp for short ones and a 1024-thread block for long ones (the runtime log
names the team). A pointwise kernel over [s0, 768] keeps its 16-byte
vectorised form, and the Python backend runs one compiled graph on CUDA
tensors of many sizes against eager torch. Without a GPU they skip with
ptc's reason.
"""
import glob
import os
import re
import subprocess

import pytest

from gpucheck import require_gpu
from ptcio import build_dir

SRC = os.environ.get("PTC_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
DYN = os.path.join(SRC, "tests", "data", "dynamic")
CORPUS = sorted(glob.glob(os.path.join(DYN, "*.ptir")))


@pytest.fixture(autouse=True)
def _gpu():
    require_gpu()


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PTC_CACHE_DIR", str(tmp_path / "cache"))


def ptc_run(*args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([os.path.join(build_dir(), "tools", "run", "ptc-run"), *map(str, args)],
                          capture_output=True, text=True, timeout=600, env=e)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: os.path.basename(p))
def test_corpus_every_size_one_compile(path):
    r = ptc_run("--backend", "cuda", "--check", "--stats", "--sym", "s0=0,1,3,200,1000,5000",
                "--sym", "s1=3,1,0,64,129,768", path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    blocks = re.split(r"^sizes: ", r.stdout, flags=re.M)[1:]
    assert len(blocks) == 6
    for i, b in enumerate(blocks):
        assert "outputs match the reference" in b or "the reference fails" in b, b
        if i:
            assert "kernels: 0 compiled" in b, b


def graph(tmp_path, name, text):
    p = tmp_path / (name + ".ptir")
    p.write_text("# ptc ir v1\n" + text)
    return p


def teams(stderr):
    """The team of every launch the runtime log reports."""
    return [int(t) for t in re.findall(r"block \d+ team (\d+)", stderr)]


@pytest.mark.parametrize("n, team", [(8, 1), (300, 32), (3000, 1024), (20000, 1024)])
def test_row_length_picks_the_team(tmp_path, n, team):
    """softmax over 6 rows of s0: tiny rows a thread, short a warp, long a block."""
    p = graph(tmp_path, "rows", "graph f(%x: f32[6,s0] cpu) {\n"
              "  %0 = softmax(%x, -1) : f32[6,s0]\n  return (%0)\n}\n")
    r = ptc_run("--backend", "cuda", "--check", "--sym", "s0=%d" % n, p,
                env={"PTC_LOGS": "+runtime"})
    assert r.returncode == 0 and "match the reference" in r.stdout, r.stdout + r.stderr
    assert teams(r.stderr)[:1] == [team], r.stderr


def test_many_rows_and_column_reductions(tmp_path):
    """Outer sizes decide too: many short rows, and sums down columns of s0 rows."""
    p = graph(tmp_path, "cols", "graph f(%x: f32[s0,s1] cpu, %w: f32[s1] cpu, %b: f32[s1] cpu) {\n"
              "  %0 = sum(%x, [0]) : f32[s1]\n  %1 = amax(%x, [1]) : f32[s0]\n"
              "  %2 = layer_norm(%x, [s1], %w, %b) : f32[s0,s1]\n"
              "  %3 = var(%x, [0]) : f32[s1]\n  return (%0, %1, %2, %3)\n}\n")
    r = ptc_run("--backend", "cuda", "--check", "--stats", "--sym", "s0=1,7,40000,3,100000",
                "--sym", "s1=5,3000,17,70000,64", p)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert r.stdout.count("outputs match the reference") == 5, r.stdout


def test_symbolic_pointwise_stays_vectorised(tmp_path):
    p = graph(tmp_path, "pw", "graph f(%x: f32[s0,768] cpu, %b: f32[768] cpu) {\n"
              "  %0 = add(%x, %b) : f32[s0,768]\n  %1 = gelu(%0) : f32[s0,768]\n"
              "  return (%1)\n}\n")
    r = ptc_run("--backend", "cuda", "--check", "--sym", "s0=1,77,4096", p,
                env={"PTC_LOGS": "+runtime"})
    assert r.returncode == 0 and r.stdout.count("match the reference") == 3, r.stdout + r.stderr
    assert "vectorised" in r.stderr, r.stderr


def test_python_backend_on_cuda_tensors():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    from ptc import _C
    text = ("# ptc ir v1\ngraph f(%x: f32[s0,s1] cuda, %w: f32[s1] cuda, %b: f32[s1] cuda) {\n"
            "  %0 = layer_norm(%x, [s1], %w, %b) : f32[s0,s1]\n"
            "  %1 = softmax(%0, -1) : f32[s0,s1]\n  %2 = sum(%1, [0]) : f32[s1]\n"
            "  return (%1, %2)\n}\n")
    compiled = _C._compile_ptir(text)
    g = torch.Generator(device="cuda").manual_seed(0)
    for rows, cols in ((1, 5), (33, 768), (4096, 64), (3, 20000), (257, 1000)):
        x = torch.randn(rows, cols, device="cuda", generator=g)
        w = torch.randn(cols, device="cuda", generator=g)
        b = torch.randn(cols, device="cuda", generator=g)
        got = _C._run_compiled(compiled, (x, w, b))
        s = torch.softmax(torch.nn.functional.layer_norm(x, [cols], w, b), -1)
        torch.testing.assert_close(got[0], s, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(got[1], s.sum(0), rtol=1e-4, atol=1e-4)
