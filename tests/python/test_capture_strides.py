"""stride() and is_contiguous() of traced tensors, against eager.

ptc knows a tensor's strides where it enters the graph (the guards fix an
argument's layout) and follows them through views (t, transpose, permute,
expand, unsqueeze, slicing, select, split, chunk, unbind, detach), through
the matmul family (row-major results) and through ops whose operands share
one layout (x.t() + 1 stays transposed, channels-last stays channels-last).
Where it does not know them it breaks, and the query runs on the real
tensor: never a made-up answer (main answered row-major for every result).
"""
import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402
from test_capture_inplace_inputs import counts  # noqa: E402


def views(x):
    return (x.t().stride(), x.t().is_contiguous(), x[:, ::2].stride(), x[1].stride(),
            x.permute(1, 0).unsqueeze(0).stride(), x.unsqueeze(2).expand(2, 4, 3).stride(),
            [c.stride() for c in x.chunk(2, 1)], [u.stride() for u in x.unbind(1)],
            x.t().detach().stride(), x.narrow(1, 1, 2).is_contiguous())


def computed(x):
    return ((x * 2).stride(), (x.t() + 1).stride(), (x @ x.t()).stride(),
            x.t().contiguous().stride(), (x.t() * x.t()).is_contiguous(), x.sum(0).stride())


def channels_last(x):
    return (x.is_contiguous(memory_format=torch.channels_last), x.is_contiguous(),
            (x + 1).is_contiguous(memory_format=torch.channels_last), (x * x).stride())


def created(x):
    # factories are row-major (main: a break, PTC-B007, at each query)
    z = torch.zeros(2, 3)
    return (z.stride(), torch.empty(4, 5).stride(0), torch.full((2, 3, 4), 1.0).stride(),
            torch.arange(6).view(2, 3).stride(), torch.randn(2, 3).t().stride(),
            x.new_zeros(4, 2).stride(), z.is_contiguous(), x + z.stride(0))


def created_like(x):
    # a *_like has its input's strides where the input is dense, else dense
    # strides in its order (torch's preserve_format; main answered
    # row-major for zeros_like(x.t()) from the graph's row-major result: a
    # silent wrong answer)
    return (torch.zeros_like(x.t()).stride(), torch.empty_like(x.t()).is_contiguous(),
            torch.ones_like(x.unsqueeze(2).expand(2, 4, 3)).stride(),
            torch.zeros_like(x.t(), memory_format=torch.contiguous_format).stride(),
            torch.randn_like(x[:, ::2].t()).stride(), x + torch.full_like(x.t(), 2).stride(0))


def created_channels_last(x):
    # empty(memory_format=) is not modelled: a break, the call runs for real
    return (torch.zeros_like(x[:, :, ::2]).stride(), torch.empty_like(x.permute(0, 2, 3, 1)).stride(),
            torch.empty(1, 2, 3, 3, memory_format=torch.channels_last).stride(), x * 2)


def in_memory_formats(x):
    # contiguous/clone/to(memory_format=...) lay the result out as asked
    # (main ignored the keyword: row-major results, values right)
    cl = torch.channels_last
    a, b, c = x.contiguous(memory_format=cl), x.clone(memory_format=cl), x.to(memory_format=cl)
    d = x.to(torch.float64, memory_format=cl)
    e = x.clone(memory_format=torch.contiguous_format)
    return (a.stride(), (a * 2).stride(), b.stride(), (b + 1).stride(), c.stride(), d.stride(),
            e.stride(), (e + 1).stride(), a.is_contiguous(memory_format=cl), a + b + c + e)


def unknown_layout(x):
    # reshape of a transposed tensor may copy: ptc breaks and asks eager
    return x.t().reshape(-1).stride(), x + 1


@pytest.mark.parametrize("fn,make,breaks", [
    (views, lambda: torch.ones(2, 4), 0),
    (computed, lambda: torch.ones(2, 4), 0),
    (channels_last, lambda: torch.ones(2, 3, 4, 5).to(memory_format=torch.channels_last), 0),
    (channels_last, lambda: torch.ones(2, 3, 4, 5), 0),
    (unknown_layout, lambda: torch.ones(2, 4), 1),
    (in_memory_formats, lambda: torch.arange(120.0).view(2, 3, 4, 5), 0),
    (in_memory_formats, lambda: torch.arange(120.0).view(2, 3, 4, 5).to(memory_format=torch.channels_last), 0),
    (created, lambda: torch.ones(2, 4), 0),
    (created_like, lambda: torch.ones(2, 4), 0),
    (created_channels_last, lambda: torch.ones(2, 3, 4, 5).to(memory_format=torch.channels_last), 1),
])
@pytest.mark.parametrize("backend", ["eager", "ptc"])
def test_strides_are_eagers(fn, make, breaks, backend):
    compiled = ptc.compile(fn, backend=backend)
    for _ in range(2):
        want, got = fn(make()), compiled(make())
        assert str(want) == str(got)
    assert counts(compiled)[1] == breaks


def test_memory_format_where_eager_rejects_it_raises_eagers_error():
    """torch.zeros takes no memory_format: eager's TypeError (main ignored
    the keyword and returned zeros)."""
    def f(x):
        return x + torch.zeros(3, memory_format=torch.contiguous_format)

    with pytest.raises(TypeError) as want:
        f(torch.ones(3))
    with pytest.raises(TypeError) as got:
        ptc.compile(f, backend="eager")(torch.ones(3))
    assert str(got.value) == str(want.value)


def returned_like(x):
    # returned, a *_like keeps its input's layout (main: row-major, values right)
    return (torch.zeros_like(x), torch.empty_like(x), torch.ones_like(x), torch.full_like(x, 2.0),
            torch.rand_like(x), torch.randn_like(x), torch.zeros_like(x) + x,
            torch.zeros_like(x, memory_format=torch.contiguous_format))


# size-1 dims: their strides are the input's, which no permutation of
# row-major gives (main: (4, 1, 4) for eager's (1, 1, 4))
SIZE1_MAKES = [
    lambda: torch.arange(12.0).view(3, 4, 1).permute(2, 1, 0),
    lambda: torch.arange(12.0).view(4, 1, 3).permute(1, 2, 0),
]


@pytest.mark.parametrize("make", [
    lambda: torch.arange(12.0).view(3, 4).t(),
    lambda: torch.arange(24.0).view(2, 3, 4).permute(2, 0, 1),
    lambda: torch.arange(24.0).view(4, 6)[:, ::2],  # not dense: dense in its order
    lambda: torch.arange(48.0).view(1, 3, 4, 4).to(memory_format=torch.channels_last),
    *SIZE1_MAKES,
], ids=["transposed", "permuted", "strided", "channels_last", "size1_inner", "size1_outer"])
@pytest.mark.parametrize("backend", ["eager", "ptc"])
def test_returned_like_has_eagers_strides(make, backend):
    if backend == "eager" and make in SIZE1_MAKES:
        pytest.skip("the eager backend returns a size-1 dim's stride as torch's permute gives it")
    compiled = ptc.compile(returned_like, backend=backend)
    for _ in range(2):
        x = make()
        want, got = returned_like(x), compiled(x)
        assert [w.stride() for w in want] == [g.stride() for g in got]
        for i in (0, 2, 3, 6, 7):  # the deterministic ones
            assert torch.equal(want[i], got[i])
    assert counts(compiled)[:2] == (1, 0)


def size1_dims(x):
    # TensorIterator keeps a size-1 dim's stride when the result's dim is 1
    # too, and orders dims by it (main: (12, 1, 3) for eager's (3, 1, 3));
    # an in-place op keeps its tensor's strides (main: row-major after
    # empty_like(x).fill_)
    z = torch.empty_like(x)
    z.fill_(1)
    return (x + 1, x * x, torch.zeros_like(x) + x, torch.ones_like(x).mul_(x), z, x.exp(),
            (x + 1).stride(), z.stride(), (torch.zeros_like(x) + x).stride())


@pytest.mark.parametrize("make", [
    lambda: torch.arange(12.0).view(3, 4, 1).permute(2, 1, 0),
    lambda: torch.arange(12.0).view(4, 1, 3).permute(1, 2, 0),
], ids=["size1_inner", "size1_outer"])
@pytest.mark.parametrize("backend", ["eager", "ptc"])
def test_size1_dims_keep_eagers_strides(make, backend):
    compiled = ptc.compile(size1_dims, backend=backend, fullgraph=True)
    for _ in range(2):
        x = make()
        want, got = size1_dims(x), compiled(x)
        if backend == "ptc":  # the eager backend's: as torch's ops on the graph give them
            assert [w.stride() for w in want[:6]] == [g.stride() for g in got[:6]]
        assert want[6:] == got[6:]
        for w, g in zip(want[:6], got[:6]):
            torch.testing.assert_close(g, w)


@pytest.mark.parametrize("backend", ["eager", "ptc"])
def test_memory_format_results_are_eagers(backend):
    """Returned, a result laid out channels-last keeps eager's strides, and
    contiguous(memory_format=) of a tensor already so laid out is the tensor
    itself, as eager's."""
    cl = torch.channels_last

    def f(x):
        y = x.contiguous(memory_format=cl)
        return y, x.clone(memory_format=cl) * 2, y is x

    compiled = ptc.compile(f, backend=backend)
    for make in (lambda: torch.arange(120.0).view(2, 3, 4, 5),
                 lambda: torch.arange(120.0).view(2, 3, 4, 5).to(memory_format=cl)):
        want, got = f(make()), compiled(make())
        assert [t.stride() for t in got[:2]] == [t.stride() for t in want[:2]]
        assert all(torch.equal(g, w) for g, w in zip(got[:2], want[:2])) and got[2] == want[2]
    assert counts(compiled)[1] == 0
