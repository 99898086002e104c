"""torch.nn.functional calls that trace into one graph (issue 13): pad in
reflect, replicate and circular mode (and the padding modules), one_hot,
cosine_similarity, pairwise_distance, triplet_margin_loss, kl_div, unfold
and fold, embedding_bag, channel_shuffle (and their modules); and
torch.aminmax, torch.trace, torch.searchsorted, torch.bucketize,
torch.isin, torch.rot90, torch.cross (linalg.cross), torch.addmv,
torch.kron, torch.cartesian_prod, torch.diag_embed, torch.cov,
torch.corrcoef, torch.cdist, torch.linalg.matrix_norm, torch.block_diag,
torch.kthvalue, torch.median and torch.nanmedian,
and the views torch.tensor_split, torch.atleast_1d/2d/3d and torch.meshgrid. Each was a graph break
(PTC-B007) before. Compiled by ptc and compared with eager: values,
gradients against torch autograd, eager's errors; what ptc does not trace
breaks with its reason and gives eager's values.
"""
import warnings

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import ptc  # noqa: E402
from like_eager import assert_breaks_like_eager, outcome  # noqa: E402


def operands():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 6, generator=g)
    a, b = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)
    p = torch.softmax(torch.randn(4, 8, generator=g), -1)
    return x, a, b, p


CASES = {
    "pad_reflect": lambda x, a, b, p: F.pad(x, (2, 1, 3, 0), mode="reflect") * 2,
    "pad_reflect_1d": lambda x, a, b, p: F.pad(x[0], (1, 4), mode="reflect"),
    "pad_reflect_3d": lambda x, a, b, p: F.pad(x, (1, 1, 2, 0, 1, 1), mode="reflect"),
    "pad_replicate": lambda x, a, b, p: F.pad(x[0], (2, 3), mode="replicate"),
    "pad_replicate_wide": lambda x, a, b, p: F.pad(x, (9, 0, 0, 7), mode="replicate"),
    "pad_circular": lambda x, a, b, p: F.pad(x, (1, 6, 5, 1), mode="circular"),
    "reflection_pad_module": lambda x, a, b, p: torch.nn.ReflectionPad2d(2)(x),
    "replication_pad_module": lambda x, a, b, p: torch.nn.ReplicationPad1d((0, 2))(a[None]),
    "cosine_similarity": lambda x, a, b, p: F.cosine_similarity(a, b),
    "cosine_similarity_dim0_eps": lambda x, a, b, p: torch.cosine_similarity(a, b, 0, 1e-3),
    "cosine_similarity_zero_row": lambda x, a, b, p: F.cosine_similarity(a * 0, b, dim=-1),
    "pairwise_distance": lambda x, a, b, p: F.pairwise_distance(a, b),
    "pairwise_distance_p1_keepdim": lambda x, a, b, p: F.pairwise_distance(a, b, 1.0,
                                                                           keepdim=True),
    "pairwise_distance_p3": lambda x, a, b, p: torch.pairwise_distance(a, b, p=3, eps=0.0),
    "pairwise_distance_inf": lambda x, a, b, p: F.pairwise_distance(a, b, float("inf")),
    "triplet_margin_loss": lambda x, a, b, p: F.triplet_margin_loss(a, b, p),
    "triplet_margin_loss_swap_p1": lambda x, a, b, p: F.triplet_margin_loss(
        a, b, p, margin=0.5, p=1, swap=True, reduction="none"),
    "triplet_margin_module": lambda x, a, b, p: torch.nn.TripletMarginLoss(2.0, reduction="sum")(
        a, p, b),
    "kl_div_batchmean": lambda x, a, b, p: F.kl_div(F.log_softmax(a, -1), p,
                                                    reduction="batchmean"),
    "kl_div_sum_log_target": lambda x, a, b, p: F.kl_div(a, p.log(), reduction="sum",
                                                         log_target=True),
    "kl_div_none_zero_target": lambda x, a, b, p: F.kl_div(a, p * (p > 0.1), reduction="none"),
    "one_hot": lambda x, a, b, p: F.one_hot(torch.tensor([[0, 3], [2, 1]]), 5) * 2,
    "one_hot_of_argmax": lambda x, a, b, p: F.one_hot(a.argmax(-1), num_classes=8).float() + p,
    "channel_shuffle": lambda x, a, b, p: F.channel_shuffle(x.repeat(1, 2, 1, 1), 3),
    "channel_shuffle_module": lambda x, a, b, p: torch.nn.ChannelShuffle(2)(a[None, :, :, None]),
    "trace": lambda x, a, b, p: torch.trace(a) + x[0, 0].trace(),
    "trace_integers": lambda x, a, b, p: (a * 10).int().trace(),
    "rot90": lambda x, a, b, p: torch.rot90(x),
    "rot90_twice_dims": lambda x, a, b, p: x.rot90(2, [1, 3]),
    "rot90_back_reversed_dims": lambda x, a, b, p: torch.rot90(x, -1, (3, 0)),
    "rot90_full_turn": lambda x, a, b, p: torch.rot90(x, 4),
    "linalg_cross": lambda x, a, b, p: torch.linalg.cross(a[:, :3], b[:1, 5:]),
    "cross_dim0": lambda x, a, b, p: torch.cross(a[:3], b[1:4], dim=0),
    "addmv": lambda x, a, b, p: torch.addmv(p[:, 0], a, b[0]),
    "addmv_scaled": lambda x, a, b, p: p[:, 1].addmv(a, b[1], beta=0.5, alpha=2),
    "addmv_beta_zero_ignores_nan": lambda x, a, b, p: torch.addmv(p[:, 0] / 0 * 0, a, b[0],
                                                                  beta=0),
    "kron": lambda x, a, b, p: torch.kron(a, b[:2, :2]),
    "kron_of_ranks": lambda x, a, b, p: torch.kron(a[0], x[0]) + x[0, :1].kron(a[:1, :2]).sum(),
    "cartesian_prod": lambda x, a, b, p: torch.cartesian_prod(a[0, :2], b[1, :3]),
    "cartesian_prod_integers": lambda x, a, b, p: torch.cartesian_prod(
        torch.arange(2), torch.arange(3), torch.arange(2)),
    "diag_embed": lambda x, a, b, p: torch.diag_embed(a),
    "diag_embed_offset": lambda x, a, b, p: torch.diag_embed(a, 2) + a[:, :1, None],
    "diag_embed_below": lambda x, a, b, p: a[0].diag_embed(-2, dim1=-2, dim2=-1),
    "cov": lambda x, a, b, p: torch.cov(a),
    "cov_one_variable": lambda x, a, b, p: torch.cov(a[0], correction=0),
    "cov_integers": lambda x, a, b, p: (a * 10).int().cov(),
    "corrcoef": lambda x, a, b, p: torch.corrcoef(a),
    "corrcoef_constant_row": lambda x, a, b, p: torch.corrcoef(torch.stack([a[0], a[0] * 0])),
    "cdist": lambda x, a, b, p: torch.cdist(x[0], x[1, :, :4]),
    "cdist_p1_2d": lambda x, a, b, p: torch.cdist(a, b[:2], p=1),
    "cdist_p3": lambda x, a, b, p: torch.cdist(a[None], b[None], p=3.0),
    "cdist_inf_mm_mode": lambda x, a, b, p: torch.cdist(a, b, float("inf"),
                                                        "use_mm_for_euclid_dist"),
    "matrix_norm": lambda x, a, b, p: torch.linalg.matrix_norm(x),
    "matrix_norm_1": lambda x, a, b, p: torch.linalg.matrix_norm(x, ord=1),
    "matrix_norm_minus_inf_keepdim": lambda x, a, b, p: torch.linalg.matrix_norm(
        a, float("-inf"), keepdim=True),
    "block_diag": lambda x, a, b, p: torch.block_diag(a, b[0, 0], b[1, :3], x[0, 0]),
    "unfold": lambda x, a, b, p: F.unfold(x, 3),
    "unfold_every_argument": lambda x, a, b, p: F.unfold(x, (2, 3), dilation=(2, 1),
                                                         padding=(1, 2), stride=(2, 3)),
    "unfold_unbatched": lambda x, a, b, p: F.unfold(x[0], 2, stride=2),
    "fold_of_unfold": lambda x, a, b, p: F.fold(F.unfold(x, 3, padding=1), (5, 6), 3,
                                                padding=1),
    "fold_strided": lambda x, a, b, p: F.fold(F.unfold(x, (2, 3), stride=(2, 3)) * 2, (5, 6),
                                              (2, 3), stride=(2, 3)),
    "fold_unbatched": lambda x, a, b, p: F.fold(F.unfold(x[0], 2, dilation=2), (5, 6), 2,
                                                dilation=2),
    "unfold_fold_modules": lambda x, a, b, p: torch.nn.Fold((5, 6), 3, padding=1)(
        torch.nn.Unfold(3, padding=1)(x)),
}


@pytest.mark.parametrize("name", CASES)
def test_one_graph_with_eager_values(name):
    fn, args = CASES[name], operands()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # kl_div's 'mean' warning is not the point here
        want = fn(*args)
    got = ptc.compile(fn, fullgraph=True)(*args)
    assert (got.dtype, got.stride()) == (want.dtype, want.stride())
    torch.testing.assert_close(got, want, equal_nan=True)


GRADIENTS = {
    "pad_reflect": lambda x, a, b, p: F.pad(x, (2, 1, 3, 0), mode="reflect"),
    "pad_replicate": lambda x, a, b, p: F.pad(x, (3, 3, 0, 2), mode="replicate"),
    "pad_circular": lambda x, a, b, p: F.pad(x, (1, 2, 2, 1), mode="circular"),
    "cosine_similarity": lambda x, a, b, p: F.cosine_similarity(a, b),
    "pairwise_distance": lambda x, a, b, p: F.pairwise_distance(a, b, p=1.5),
    "triplet_margin_loss": lambda x, a, b, p: F.triplet_margin_loss(
        x[0, 0, :4], a[:, :6], b[:, 1:7], swap=True),
    "kl_div": lambda x, a, b, p: F.kl_div(F.log_softmax(a, -1), torch.softmax(b, -1),
                                          reduction="batchmean"),
    "channel_shuffle": lambda x, a, b, p: F.channel_shuffle(x, 3) * x,
    "rot90": lambda x, a, b, p: torch.rot90(x, 1, (2, 3)) * torch.rot90(x, 3, (2, 3)),
    "cross": lambda x, a, b, p: torch.linalg.cross(a[:, 2:5], b[:, :3]),
    "addmv": lambda x, a, b, p: torch.addmv(b[:, 0], a, b[1], beta=0.3, alpha=-2.0),
    "kron": lambda x, a, b, p: torch.kron(a, b[:2, :3]),
    "cdist": lambda x, a, b, p: torch.cdist(a, b) + torch.cdist(a, a, p=1.5),
    "cdist_of_itself": lambda x, a, b, p: torch.cdist(a, a),  # 0 at the diagonal: gradient 0
    "matrix_norm": lambda x, a, b, p: torch.linalg.matrix_norm(x) + torch.linalg.matrix_norm(
        x, 1).sum(),
    "block_diag": lambda x, a, b, p: torch.block_diag(a, b[:2, :3], a[0, 0]),
    "cartesian_prod": lambda x, a, b, p: torch.cartesian_prod(a[0, :3], b[0, :4]),
    "diag_embed": lambda x, a, b, p: torch.diag_embed(a, -1),
    "cov_corrcoef": lambda x, a, b, p: torch.cov(a) + torch.corrcoef(b),
    "trace": lambda x, a, b, p: torch.trace(a * b)[None],
    "unfold": lambda x, a, b, p: F.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
    "fold": lambda x, a, b, p: F.fold(a.reshape(1, 4, 8).repeat(1, 2, 2)[:, :, :12], (4, 5), 2,
                                      padding=(1, 0), stride=(2, 1)),
}


@pytest.mark.parametrize("name", GRADIENTS)
def test_gradients_like_autograd(name):
    fn, args = GRADIENTS[name], operands()
    grads = []
    for f in (fn, ptc.compile(fn, fullgraph=True)):
        leaves = [t.clone().requires_grad_() for t in args[:3]]
        out = f(*leaves, args[3])
        w = torch.linspace(-1, 2, out.numel()).reshape(out.shape)
        grads.append(torch.autograd.grad((out * w).sum(), leaves, allow_unused=True))
    for got, want in zip(grads[1], grads[0]):
        if want is None:
            assert got is None or not got.any()
        else:
            torch.testing.assert_close(got, want)


@pytest.mark.parametrize("fn", [
    lambda a: torch.aminmax(a),
    lambda a: a.aminmax(dim=1, keepdim=True),
    lambda a: torch.aminmax((a * 10).int(), dim=-1),
    lambda a: torch.aminmax(a, keepdim=True),
])
def test_aminmax_is_eager_s_named_pair(fn):
    a = operands()[1]
    got, want = ptc.compile(fn, fullgraph=True)(a), fn(a)
    assert type(got) is type(want)
    for g, w in [(got.min, want.min), (got.max, want.max)]:
        assert (g.dtype, g.shape) == (w.dtype, w.shape)
        torch.testing.assert_close(g, w)


def test_aminmax_of_a_tensor_that_requires_grad_runs_eagerly():
    """Eager's aminmax has no derivative (its backward raises): ptc breaks
    there rather than give one."""
    def fn(a):
        return torch.aminmax(a, dim=1).max * 2

    a = operands()[1].requires_grad_()
    assert_breaks_like_eager(fn, (a,), "requires grad", torch.testing.assert_close)
    errors = []
    for f in (fn, ptc.compile(fn)):
        with pytest.raises(RuntimeError) as e:
            f(a).sum().backward()
        errors.append(str(e.value))
    assert errors[0] == errors[1] and "not implemented" in errors[0]


BOUNDS = torch.tensor([1.0, 3.0, 5.0])
VALUES = torch.tensor([float("nan"), 0.0, 1.0, 2.0, 5.0, 6.0, float("inf"), -float("inf")])
SEARCHES = {
    "bucketize": lambda v, b: torch.bucketize(v, b),
    "bucketize_right_int32": lambda v, b: torch.bucketize(v, b, right=True, out_int32=True),
    "bucketize_integers": lambda v, b: torch.bucketize(v[1:7].reshape(2, 3).long(), b),
    "searchsorted": lambda v, b: torch.searchsorted(b, v),
    "searchsorted_side_right": lambda v, b: torch.searchsorted(b, v, side="right"),
    "searchsorted_batched": lambda v, b: torch.searchsorted(torch.stack([b, b * 2]),
                                                            torch.stack([v, v - 1]), right=True),
    "isin": lambda v, b: torch.isin(v, b),
    "isin_invert": lambda v, b: torch.isin(v.reshape(4, 2), b, invert=True),
    "isin_integers": lambda v, b: torch.isin(torch.tensor([1, 2, 3]), b.long()[:, None]),
}


@pytest.mark.parametrize("name", SEARCHES)
def test_searches_like_eager(name):
    """NaN values land past the last boundary and are in no set, as eager's."""
    fn = SEARCHES[name]
    got, want = ptc.compile(fn, fullgraph=True)(VALUES, BOUNDS), fn(VALUES, BOUNDS)
    assert (got.dtype, got.shape) == (want.dtype, want.shape) and torch.equal(got, want)


VIEWS = {
    "tensor_split_sections": lambda x: torch.tensor_split(x, 4, dim=1),
    "tensor_split_points": lambda x: x.tensor_split([1, 4]),
    "tensor_split_repeated_point": lambda x: torch.tensor_split(x, (2, 2, 6), dim=-1),
    "tensor_split_sections_keyword": lambda x: torch.tensor_split(x, sections=3),
    "tensor_split_indices_keyword": lambda x: torch.tensor_split(x, indices=[3]),
    "atleast_3d_of_2d": lambda x: torch.atleast_3d(x),
    "atleast_2d_of_1d": lambda x: torch.atleast_2d(x[0]),
    "atleast_1d_of_0d": lambda x: torch.atleast_1d(x[0, 0]),
    "atleast_3d_of_1d": lambda x: torch.atleast_3d(x[0]),
}


@pytest.mark.parametrize("name", VIEWS)
def test_views_like_eager(name):
    fn, x = VIEWS[name], torch.arange(24.0).reshape(4, 6)
    got, want = ptc.compile(fn, fullgraph=True)(x), fn(x)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert (g.shape, g.stride()) == (w.shape, w.stride()) and torch.equal(g, w)


@pytest.mark.parametrize("fn", [
    lambda a, b: torch.meshgrid(a, b, indexing="ij"),
    lambda a, b: torch.meshgrid(a, b, indexing="xy"),
    lambda a, b: torch.meshgrid([a, b, a], indexing="xy"),
    lambda a, b: torch.meshgrid((a,), indexing="ij"),
    lambda a, b: torch.meshgrid(b, indexing="xy"),
    lambda a, b: torch.meshgrid(a, b[0], indexing="ij"),
])
def test_meshgrid_gives_eager_s_views(fn):
    a, b = torch.arange(3.0), torch.arange(2.0) * 10
    got, want = ptc.compile(fn, fullgraph=True)(a, b), fn(a, b)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert (g.shape, g.stride()) == (w.shape, w.stride()) and torch.equal(g, w)
        assert g._base is not None and g.data_ptr() in (a.data_ptr(), b.data_ptr())


def test_meshgrid_without_indexing_keeps_eager_s_warning():
    fn = lambda a, b: torch.meshgrid(a, b)[0] + 1  # noqa: E731
    a, b = torch.arange(3.0), torch.arange(2.0)
    with pytest.warns(UserWarning, match="indexing argument"):
        assert_breaks_like_eager(fn, (a, b), "without indexing", torch.testing.assert_close)


NAN = float("nan")
ORDER_INPUT = torch.tensor([[1.0, NAN, 3.0, NAN], [4.0, 2.0, 2.0, 9.0], [NAN] * 4])
ORDER_STATS = {
    "median_dim": lambda x: torch.median(x, 1),
    "nanmedian_dim": lambda x: torch.nanmedian(x, 1),
    "kthvalue": lambda x: torch.kthvalue(x, 3, 1),
    "kthvalue_keepdim": lambda x: x.kthvalue(1, 0, keepdim=True),
    "median_integers": lambda x: x.nan_to_num(7).long().median(dim=0),
    "median_keepdim": lambda x: torch.median(x[1:2] * torch.arange(1.0, 8.0)[:, None], 0, True),
}


@pytest.mark.parametrize("name", ORDER_STATS)
def test_order_statistics_like_eager(name):
    """Values as eager's (NaN where eager's is); the indices name elements
    equal to them (eager does not promise which of equal elements, nor which
    NaN of an all-NaN line)."""
    fn = ORDER_STATS[name]
    got, want = ptc.compile(fn, fullgraph=True)(ORDER_INPUT), fn(ORDER_INPUT)
    assert type(got) is type(want) and got.indices.dtype == torch.int64
    torch.testing.assert_close(got.values, want.values, equal_nan=True)
    x = ORDER_INPUT.nan_to_num(7).long() if "integers" in name else ORDER_INPUT
    if "keepdim" in name and "kthvalue" not in name:
        x = x[1:2] * torch.arange(1.0, 8.0)[:, None]
    dim = 0 if "keepdim" in name or "integers" in name else 1
    idx = got.indices if got.indices.dim() == x.dim() else got.indices.unsqueeze(dim)
    picked = x.gather(dim, idx)
    torch.testing.assert_close(picked, got.values.reshape(picked.shape), equal_nan=True)


@pytest.mark.parametrize("fn", [torch.median, torch.nanmedian])
def test_median_of_every_element(fn):
    for x in (ORDER_INPUT, ORDER_INPUT[1], ORDER_INPUT.nan_to_num(5).int()):
        got, want = ptc.compile(fn, fullgraph=True)(x), fn(x)
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want, equal_nan=True)


def test_median_gradient_reaches_the_median():
    x = torch.randn(5, 7, generator=torch.Generator().manual_seed(3))
    grads = []
    for f in (lambda x: torch.median(x, 1).values.sum() + torch.kthvalue(x, 2, 0).values.sum(),):
        for g in (f, ptc.compile(f)):
            xs = x.clone().requires_grad_()
            grads.append(torch.autograd.grad(g(xs), xs)[0])
    torch.testing.assert_close(grads[1], grads[0])


def test_atleast_of_enough_dims_is_the_tensor_itself():
    x = torch.ones(2, 3)
    assert ptc.compile(lambda x: torch.atleast_2d(x), fullgraph=True)(x) is x


def test_writes_through_the_views_reach_the_base():
    def f(x):
        a, b = torch.tensor_split(x, 2, dim=1)
        b.mul_(10)
        torch.atleast_3d(a[0]).add_(1)
        return x.sum(), a + 1

    x = torch.arange(24.0).reshape(4, 6)
    wx, cx = x.clone(), x.clone()
    want, got = f(wx), ptc.compile(f, fullgraph=True)(cx)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(cx, wx)


# embedding_bag: 10 rows of 3, 8 places in bags [0, 4), [4, 4), [4, 8)
BAG_WEIGHT = torch.randn(10, 3, generator=torch.Generator().manual_seed(2))
BAG_INPUT = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
BAG_OFFSETS = torch.tensor([0, 4, 4])
BAG_SAMPLE_WEIGHTS = torch.linspace(0.1, 0.8, 8)
EMBEDDING_BAG = {
    "mean": lambda w, i, o, s: F.embedding_bag(i, w, o),
    "sum_per_sample": lambda w, i, o, s: F.embedding_bag(i, w, o, mode="sum",
                                                         per_sample_weights=s),
    "sum_last_offset": lambda w, i, o, s: F.embedding_bag(i, w, torch.tensor([0, 4, 8]),
                                                          mode="sum", include_last_offset=True),
    "mean_padding": lambda w, i, o, s: F.embedding_bag(i, w, o, padding_idx=4),
    "mean_2d": lambda w, i, o, s: F.embedding_bag(i.reshape(2, 4), w),
    "max_2d_padding": lambda w, i, o, s: F.embedding_bag(i.reshape(2, 4), w, mode="max",
                                                         padding_idx=-6),
    "max_2d_all_padding": lambda w, i, o, s: F.embedding_bag(i[:4].reshape(2, 2) * 0 + 4, w,
                                                             mode="max", padding_idx=4),
    "sum_2d_per_sample": lambda w, i, o, s: F.embedding_bag(i.reshape(4, 2), w, mode="sum",
                                                            per_sample_weights=s.reshape(4, 2)),
}


@pytest.mark.parametrize("name", EMBEDDING_BAG)
def test_embedding_bag_like_eager(name):
    """Values, and the gradients of the weight and the per-sample weights."""
    fn = EMBEDDING_BAG[name]
    results = []
    for f in (fn, ptc.compile(fn, fullgraph=True)):
        w, s = BAG_WEIGHT.clone().requires_grad_(), BAG_SAMPLE_WEIGHTS.clone().requires_grad_()
        out = f(w, BAG_INPUT, BAG_OFFSETS, s)
        grads = torch.autograd.grad((out * torch.arange(out.numel()).reshape(out.shape)).sum(),
                                    (w, s), allow_unused=True)
        results.append((out, grads))
    torch.testing.assert_close(results[1][0], results[0][0])
    for got, want in zip(results[1][1], results[0][1]):
        if want is None:
            assert got is None or not got.any()
        else:
            torch.testing.assert_close(got, want)


def test_embedding_bag_module_is_one_graph():
    bag = torch.nn.EmbeddingBag.from_pretrained(BAG_WEIGHT, mode="sum")
    fn = lambda i, o: bag(i, o) * 2  # noqa: E731
    torch.testing.assert_close(ptc.compile(fn, fullgraph=True)(BAG_INPUT, BAG_OFFSETS),
                               fn(BAG_INPUT, BAG_OFFSETS))


@pytest.mark.parametrize("fn", [
    lambda c: F.one_hot(c, 3),   # a class past the last
    lambda c: F.one_hot(c - 3, 5),  # a negative class
])
def test_one_hot_of_a_bad_class_raises_eager_s_error(fn):
    c = torch.tensor([0, 2, 4])
    want = outcome(fn, (c,))
    assert want[0] is RuntimeError, want
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to eager may hide the error
        assert outcome(ptc.compile(fn, fullgraph=True), (c,)) == want


@pytest.mark.parametrize("offsets", [[1, 4], [0, 4, 9], [0, -1]])
def test_embedding_bag_of_bad_offsets_raises_eager_s_error(offsets):
    """offsets[0] not 0, or past the input's end (the index checks fail and
    the segment runs again eagerly)."""
    fn = lambda w, i, o: F.embedding_bag(i, w, o, mode="sum")  # noqa: E731
    args = (BAG_WEIGHT, BAG_INPUT, torch.tensor(offsets))
    want = outcome(fn, args)
    assert want[0] is RuntimeError, want
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert outcome(ptc.compile(fn, fullgraph=True), args) == want


@pytest.mark.parametrize("fn,reason", [
    (lambda x: F.one_hot(x.long().flatten().clamp(0, 3)) + 1, "without num_classes"),
    (lambda x: F.embedding_bag(x.long().flatten(), x, torch.tensor([0, 3]), mode="max") + 1,
     "max of 1-D bags"),
    (lambda x: F.embedding_bag(x.long(), x, sparse=True) + 1, "sparse"),
    (lambda x: torch.tensor_split(x, torch.tensor([1, 3]), dim=1)[0] + 1, "by a tensor"),
    (lambda x: torch.tensor_split(x, [4, 2], dim=1)[0] + 1, "decreasing"),
    (lambda x: torch.atleast_2d(x, x)[0] + 1, "other than one tensor"),
    (lambda x: torch.linalg.matrix_norm(x, "nuc") + 1, "singular values"),
    (lambda x: F.pad(x, (6, 0), mode="reflect") + 1, "pads eager refuses"),
    (lambda x: F.pad(x, (-1, 2), mode="replicate") + 1, "negative"),
    (lambda x: F.fold(x[None], (3, 4), 2) + 1, "sizes that eager refuses"),
])
def test_what_is_not_traced_breaks_with_its_reason(fn, reason):
    x = torch.arange(12.0).reshape(2, 6) / 3
    assert_breaks_like_eager(fn, (x,), reason, torch.testing.assert_close)
