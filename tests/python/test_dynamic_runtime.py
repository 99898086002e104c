"""One compiled program serves every size: the symbolic .ptir corpus of
tests/data/dynamic runs through ptc-run's CPU backend for many values of its
symbols with one compile (--sym s0=1,5,...), each run checked against the
reference interpreter, and a second process with other sizes finds every
kernel in the disk cache (the cache key holds no concrete size)."""
import glob
import os
import re

import pytest

import ptcio

SRC = os.environ.get("PTC_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
CORPUS = sorted(glob.glob(os.path.join(SRC, "tests", "data", "dynamic", "*.ptir")))

# s0 and s1 in step: empty, 1, small, odd, a vector width's multiple, larger
S0 = "0,1,2,17,64,300"
S1 = "3,1,5,0,64,129"


def runs(stdout):
    """The per-size blocks of a multi-size run."""
    return re.split(r"^sizes: ", stdout, flags=re.M)[1:]


def test_corpus_present():
    names = {os.path.basename(p) for p in CORPUS}
    for want in ("pointwise_chain", "softmax_row", "layer_norm_row", "reductions", "matmul_m",
                 "views", "slicing", "concat", "attention"):
        assert want + ".ptir" in names


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: os.path.basename(p))
def test_one_compile_every_size(path, tmp_path, monkeypatch):
    monkeypatch.setenv("PTC_CACHE_DIR", str(tmp_path / "cache"))
    r = ptcio.ptc_run("--backend", "cpu", "--check", "--stats", "--sym", "s0=" + S0,
                      "--sym", "s1=" + S1, path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    blocks = runs(r.stdout)
    assert len(blocks) == 6, r.stdout
    for i, b in enumerate(blocks):
        # a size the reference rejects (a slice of an empty tensor) has nothing to check
        assert "outputs match the reference" in b or "the reference fails" in b, b
        m = re.search(r"^kernels: (\d+) compiled", b, flags=re.M)
        assert m, b
        if i > 0:
            assert m.group(1) == "0", b
            assert "reused (one program for every size)" in b, b
    # a fresh cache: the first size compiles (identical kernels of the graph count as cached)
    first = re.search(r"^kernels: (\d+) compiled", blocks[0], flags=re.M)
    assert int(first.group(1)) > 0, blocks[0]


@pytest.mark.parametrize("name", ["softmax_row.ptir", "attention.ptir", "concat.ptir"])
def test_other_sizes_hit_the_disk_cache(name, tmp_path, monkeypatch):
    path = os.path.join(SRC, "tests", "data", "dynamic", name)
    monkeypatch.setenv("PTC_CACHE_DIR", str(tmp_path / "cache"))
    a = ptcio.ptc_run("--backend", "cpu", "--stats", "--sym", "s0=5", "--sym", "s1=7", path)
    b = ptcio.ptc_run("--backend", "cpu", "--stats", "--check", "--sym", "s0=77", "--sym",
                      "s1=2", path)
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    na = re.search(r"kernels: (\d+) compiled, 0 cached", a.stdout)
    assert na and int(na.group(1)) > 0, a.stdout
    assert re.search(r"kernels: 0 compiled, %s cached" % na.group(1), b.stdout), b.stdout


def test_arena_is_planned_per_size(tmp_path):
    """A symbolic plan's arena follows the sizes: bigger rows, bigger arena."""
    path = os.path.join(SRC, "tests", "data", "dynamic", "attention.ptir")
    r = ptcio.ptc_run("--backend", "cpu", "--stats", "--sym", "s0=4,40,4", path)
    assert r.returncode == 0, r.stderr
    sizes = [int(x) for x in re.findall(r"arena bytes: (\d+)", r.stdout)]
    assert len(sizes) == 3 and sizes[0] > 0 and sizes[1] > sizes[0] and sizes[2] == sizes[0], sizes


def test_mean_of_an_empty_symbolic_dim_is_nan():
    """Welford's mean over a length that is 0 at run time is 0/0, as eager's."""
    path = os.path.join(SRC, "tests", "data", "dynamic", "reductions.ptir")
    r = ptcio.ptc_run("--backend", "cpu", "--check", "--sym", "s0=0", "--sym", "s1=3", path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "output 2 (%2): f32[1,3] nonfinite=3" in r.stdout, r.stdout


def test_repeat_reports_a_mean():
    path = os.path.join(SRC, "tests", "data", "dynamic", "softmax_row.ptir")
    r = ptcio.ptc_run("--backend", "cpu", "--stats", "--repeat", "5", "--sym", "s0=8,9", path)
    assert r.returncode == 0, r.stderr
    assert len(re.findall(r"run ms: [0-9.]+ \(mean of 5 runs after the first\)", r.stdout)) == 2


@pytest.mark.parametrize("args, message", [
    (["--sym", "s0=1,2", "--sym", "s1=1,2,3"], "--sym lists of different lengths"),
    (["--sym", "s0=1,,2"], "--sym expects NAME=VALUE[,VALUE...]"),
    (["--sym", "s0=1,-2"], "--sym expects NAME=VALUE[,VALUE...]"),
    (["--sym", "s0=1,2", "--emit=loops"], "a --sym list runs several sizes"),
    (["--repeat", "0"], "--repeat expects a count"),
])
def test_bad_size_lists(args, message):
    path = os.path.join(SRC, "tests", "data", "dynamic", "softmax_row.ptir")
    r = ptcio.ptc_run(*args, path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr, r.stderr


# ---- the Python backend: one compiled graph called with tensors of many sizes ----

ATTENTION = open(os.path.join(SRC, "tests", "data", "dynamic", "attention.ptir")).read()


def eager_attention(x, w_qkv, w_o, b_o, g, bt):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    B, L, C = x.shape
    qkv = F.linear(x, w_qkv).reshape(B, L, 3, 2, 8).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    a = torch.softmax(q @ k.transpose(-2, -1) * 0.3535533905932738, -1)
    o = (a @ v).transpose(1, 2).reshape(B, L, C)
    return F.layer_norm(F.linear(o, w_o, b_o) + x, [16], g, bt)


def test_python_backend_binds_sizes_each_call():
    torch = pytest.importorskip("torch")
    from ptc import _C
    compiled = _C._compile_ptir(ATTENTION)
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(48, 16, generator=gen), torch.randn(16, 16, generator=gen),
               torch.randn(16, generator=gen), torch.randn(16, generator=gen),
               torch.randn(16, generator=gen)]
    for L in (1, 7, 64, 3, 130):
        x = torch.randn(2, L, 16, generator=gen)
        (got,) = _C._run_compiled(compiled, (x, *weights))
        want = eager_attention(x, *weights)
        assert got.shape == (2, L, 16)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_python_backend_rejects_inconsistent_sizes():
    """s0 bound by the first input, contradicted by the second: a clear error."""
    torch = pytest.importorskip("torch")
    from ptc import _C
    compiled = _C._compile_ptir(open(os.path.join(SRC, "tests", "data", "dynamic",
                                                  "pointwise_chain.ptir")).read())
    with pytest.raises(Exception, match="s0|size"):
        _C._run_compiled(compiled, (torch.randn(3, 4), torch.randn(5, 4), torch.randn(4)))
    (out, _) = _C._run_compiled(compiled, (torch.randn(5, 4), torch.randn(5, 4), torch.randn(4)))
    assert out.shape == (5, 4)
