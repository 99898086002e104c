"""32-bit index arithmetic for kernels over symbolic sizes, and 64-bit where
a call needs it (skipped without a GPU).

A CUDA kernel over symbolic sizes is compiled with 32-bit index math; every
call checks ptc_cuda_fits_i32 (each buffer, the outer range and the rows
below 2^30 elements) with its own sizes, and a call past that bound runs the
kernel's 64-bit variant, generated and loaded the first time one does.
ptc._C._cuda_index_counts() counts launches by index width and the variants
made, so the tests can tell which ran. The large calls use int8 buffers of
more than 2^31 elements (about 2.2 GB each): a 32-bit offset would wrap
there, and the results are compared with eager torch exactly.
"""
import pytest

torch = pytest.importorskip("torch")

from gpucheck import require_gpu  # noqa: E402

from ptc import _C  # noqa: E402

BIG = 2**31 + 100_000_000  # elements: past what a signed 32-bit offset reaches


@pytest.fixture(autouse=True)
def _gpu(tmp_path, monkeypatch):
    require_gpu()
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    monkeypatch.setenv("PTC_CACHE_DIR", str(tmp_path / "cache"))


ROWS = ("# ptc ir v1\ngraph f(%x: i8[s0,s1] cuda) {\n"
        "  %0 = mul(%x, 3) : i8[s0,s1]\n"
        "  %1 = sum(%x, [1]) : i64[s0]\n"
        "  return (%0, %1)\n}\n")

FLAT = ("# ptc ir v1\ngraph f(%x: i8[s0] cuda) {\n"
        "  %0 = gt(%x, 0) : bool[s0]\n"
        "  %1 = sum(%x) : i64[]\n"
        "  return (%0, %1)\n}\n")


def counts():
    torch.cuda.synchronize()
    return _C._cuda_index_counts()


def delta(before, after):
    return {k: after[k] - before[k] for k in before}


def int8s(*shape):
    g = torch.Generator(device="cuda").manual_seed(0)
    return torch.randint(-128, 128, shape, dtype=torch.int8, device="cuda", generator=g)


def check_rows(compiled, x):
    got = _C._run_compiled(compiled, (x,))
    assert torch.equal(got[0], x * 3)
    assert torch.equal(got[1], x.sum(1))


def check_flat(compiled, x):
    got = _C._run_compiled(compiled, (x,))
    assert torch.equal(got[0], x > 0)
    assert torch.equal(got[1], x.sum())


def test_small_sizes_run_32_bit_kernels():
    compiled = _C._compile_ptir(ROWS)
    before = counts()
    for s0, s1 in ((1, 5), (3, 1000), (64, 4097), (1000, 768)):
        check_rows(compiled, int8s(s0, s1))
    d = delta(before, counts())
    assert d["launches_i32"] >= 4 and d["launches_i64"] == 0 and d["wide_variants"] == 0, d


def test_rows_past_2_31_elements_run_the_64_bit_variant():
    """[3, 715 million]: each row below 2^30 elements, the buffer past 2^31."""
    compiled = _C._compile_ptir(ROWS)
    check_rows(compiled, int8s(2, 300))
    before = counts()
    x = int8s(3, BIG // 3)
    check_rows(compiled, x)
    d = delta(before, counts())
    assert d["launches_i64"] >= 2 and d["launches_i32"] == 0 and d["wide_variants"] >= 1, d
    del x
    torch.cuda.empty_cache()
    # the variant is kept: a second large call makes none, a small one runs 32-bit again
    x = int8s(2, BIG // 2)
    before = counts()
    check_rows(compiled, x)
    d = delta(before, counts())
    assert d["launches_i64"] >= 2 and d["wide_variants"] == 0, d
    del x
    torch.cuda.empty_cache()
    before = counts()
    check_rows(compiled, int8s(7, 333))
    d = delta(before, counts())
    assert d["launches_i32"] >= 2 and d["launches_i64"] == 0, d


def test_one_reduction_over_more_than_2_31_elements():
    """A flat comparison and a sum whose reduction range itself passes 2^31."""
    compiled = _C._compile_ptir(FLAT)
    check_flat(compiled, int8s(1000))
    before = counts()
    x = int8s(BIG)
    check_flat(compiled, x)
    d = delta(before, counts())
    assert d["launches_i64"] >= 2 and d["launches_i32"] == 0, d
    del x
    torch.cuda.empty_cache()


def test_compiled_function_with_dynamic_sizes_runs_32_bit():
    import ptc

    ptc.reset()

    def f(x, w):
        return torch.softmax(x * w, -1).sum(0), (x > 0).sum(1)

    c = ptc.compile(f, dynamic=True)
    before = counts()
    for n, m in ((8, 100), (24, 300), (100, 4096)):
        x = torch.randn(n, m, device="cuda")
        w = torch.randn(m, device="cuda")
        got, want = c(x, w), f(x, w)
        torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-4)
        assert torch.equal(got[1], want[1])
    d = delta(before, counts())
    assert d["launches_i32"] > 0 and d["launches_i64"] == 0, d


def test_scratch_slots_past_2_31_bytes(monkeypatch):
    """A thread per row (PTC_CUDA_TEAM=1) of a softmax keeps its row in a
    global scratch slot (locals too big for registers); rows for every
    resident thread of the GPU (2048 per SM) make slots of 9 KB or more pass
    2^31 bytes in all, though the tensor stays below 2^30 elements (32-bit
    index arithmetic). main computed a slot's offset in 32 bits there: the
    offsets wrapped. The result equals torch's softmax."""
    monkeypatch.setenv("PTC_CUDA_TEAM", "1")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = sms * 2048
    cols = -(-int(2**31 * 1.05) // (rows * 4) // 256) * 256  # the row's f32 bytes make the slot
    if cols > 4096:  # a kernel-local buffer has at most 4096 elements
        pytest.skip("%d multiprocessors hold too few threads to pass 2^31 bytes" % sms)
    assert rows * cols < 2**30, (rows, cols)
    compiled = _C._compile_ptir("# ptc ir v1\ngraph f(%%x: f32[%d,%d] cuda) {\n"
                                "  %%y = softmax(%%x, -1) : f32[%d,%d]\n  return (%%y)\n}\n"
                                % (rows, cols, rows, cols))
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(rows, cols, device="cuda", generator=g)
    got = _C._run_compiled(compiled, (x,))[0]
    torch.testing.assert_close(got, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    del x, got
    torch.cuda.empty_cache()
