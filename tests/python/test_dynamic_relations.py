"""Shape reasoning under symbolic sizes: relations an op needs become guards.

When an op is valid only if two size expressions are equal (a broadcast of
s1 against 2*s0, a matmul of s1*s2 against a weight's 16), the trace keeps
the relation as a guard and goes on symbolic: a symbol the relation is
linear in is replaced by what it equals (s1 := 2*s0, one symbol from then
on), otherwise its symbols are specialised with the op named as the reason.
Divisibility (a view that splits s0 into fours) becomes a guard too, and
symbol ranges (sizes >= 2, mark_dynamic's min/max) decide comparisons
without guarding. Each case compiled one symbolic entry where main fell back
to static sizes (one compile per size).
"""
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import ptc  # noqa: E402
from test_dynamic import events, guards_of, ncompiles, run_sizes  # noqa: E402


@pytest.fixture(autouse=True)
def _reset():
    ptc.reset()
    yield


# ---- equal expressions -----------------------------------------------------------------------

def doubled_plus(x, y):
    return torch.cat([x, x]) * 2 + y  # 2*s0 against s1


def test_broadcast_of_equal_expressions_unifies_the_symbols():
    c = ptc.compile(doubled_plus, dynamic=True)
    run_sizes(c, doubled_plus, lambda n: (torch.randn(n), torch.randn(2 * n)), [3, 5, 8, 13])
    assert ncompiles(c) == 1 and not events(c, "static_fallback")
    gs = guards_of(c)
    assert "2*s0-s1 == 0 (s0 from L['x'].size(0), s1 from L['y'].size(0))" in gs, gs
    # The relation is a guard: sizes that break it are a new entry, and eager's error.
    with pytest.raises(RuntimeError):
        c(torch.randn(3), torch.randn(7))


def flat_linear(x, w):
    return F.linear(x.flatten(1), w)  # s1*s2 against w's s4


def test_matmul_of_a_product_against_an_input_size_replaces_that_symbol():
    c = ptc.compile(flat_linear, dynamic=True)
    run_sizes(c, flat_linear, lambda n: (torch.randn(n, 2, n), torch.randn(7, 2 * n)), [3, 5, 9])
    assert ncompiles(c) == 1 and not events(c, "static_fallback")
    assert "s0*s1-s3 == 0" in " ".join(guards_of(c)), guards_of(c)  # s3 := s0*s1


class FlatHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 4)  # parameters keep their sizes

    def forward(self, x):
        return self.fc(x.flatten(1))  # s1*s2 against the weight's 16


def test_matmul_against_a_static_size_specialises_with_the_op_named():
    m = FlatHead().eval()
    c = ptc.compile(m, dynamic=True)
    run_sizes(c, m, lambda n: (torch.randn(n, 2, 8),), [3, 5, 9])
    assert ncompiles(c) == 1 and not events(c, "static_fallback")
    spec = events(c, "compile")[0]["specialized"]
    assert sorted(s["value"] for s in spec) == [2, 8], spec
    assert all("linear needs s1*s2-16 == 0" in s["why"] for s in spec), spec
    gs = guards_of(c)
    assert "s0 >= 2 (s0 from L['x'].size(0))" in gs, gs  # the batch stays symbolic


def test_equal_expressions_later_in_the_trace_are_one_symbol():
    def f(x, y):
        z = torch.cat([x, x]) + y  # s1 := 2*s0 from here on
        return z.view(2, -1).sum(0) + y.view(2, -1)[1] + x  # y is [2*s0] now: these match

    c = ptc.compile(f, dynamic=True)
    run_sizes(c, f, lambda n: (torch.randn(n), torch.randn(2 * n)), [3, 4, 7])
    assert ncompiles(c) == 1 and not events(c, "static_fallback")


# ---- divisibility ----------------------------------------------------------------------------

def fours(x):
    return x.view(x.size(0), -1, 4).sum(-1)  # needs s1 % 4 == 0


def test_view_that_needs_divisibility_guards_it_and_stays_symbolic():
    c = ptc.compile(fours, dynamic=True)
    run_sizes(c, fours, lambda n: (torch.randn(n, 4 * n + 4),), [3, 5, 8, 13])
    assert ncompiles(c) == 1 and not events(c, "static_fallback")
    gs = guards_of(c)
    assert "s1%4 == 0 (s1 from L['x'].size(1))" in gs, gs
    # A size the guard rejects is eager's error, as eager raises it.
    with pytest.raises(RuntimeError):
        c(torch.randn(3, 10))


def heads(x):
    B, T, C = x.shape
    return x.view(B, T, 4, -1).transpose(1, 2).softmax(-1)  # C split in 4 heads


def test_heads_split_of_a_symbolic_width():
    c = ptc.compile(heads, dynamic=True)
    run_sizes(c, heads, lambda n: (torch.randn(2, n, 8 * n),), [3, 5, 8])
    assert ncompiles(c) == 1 and not events(c, "static_fallback")
    assert any(g.startswith("s2%4 == 0") for g in guards_of(c)), guards_of(c)


def test_odd_multiple_splits_by_the_missing_factor():
    def f(x):
        return x.reshape(-1, 4) * 2  # 6*s0 in fours: s0 must be even

    def make(n):
        x = torch.randn(2 * n, 6)
        ptc.mark_dynamic(x, 0)
        return (x,)

    c = ptc.compile(f)
    run_sizes(c, f, make, [3, 5, 8])
    assert ncompiles(c) == 1 and not events(c, "static_fallback")
    assert "(2*s0)%4 == 0 (s0 from L['x'].size(0))" in guards_of(c), guards_of(c)


# ---- symbol ranges ---------------------------------------------------------------------------

def sym_guards(compiled):
    return [g for g in guards_of(compiled) if g[:1] in "s(-" or g[:2] in ("2*", "6*")]


def test_comparisons_the_range_decides_need_no_guard():
    def f(x):
        n = x.size(0)
        if n >= 1 and n != 1 and n > 0:  # every size >= 2 passes these
            x = x * 2
        return x[n - 1 :] + x[: n - 1].sum(0)  # bounds within [0, n] need no guard

    c = ptc.compile(f, dynamic=True)
    run_sizes(c, f, lambda n: (torch.randn(n, 7),), [3, 5, 8])
    assert ncompiles(c) == 1
    assert sym_guards(c) == ["s0 >= 2 (s0 from L['x'].size(0))", "s1 >= 2 (s1 from L['x'].size(1))"], (
        sym_guards(c))


def test_mark_dynamic_bounds_decide_comparisons():
    def f(x):
        if x.size(0) > 3 and x.size(0) < 100:  # mark_dynamic(min=4, max=64) decides both
            return x + 1
        return x - 1

    def make(n):
        x = torch.randn(n, 3)
        ptc.mark_dynamic(x, 0, min=4, max=64)
        return (x,)

    c = ptc.compile(f)
    run_sizes(c, f, make, [4, 9, 64])
    assert ncompiles(c) == 1
    assert sym_guards(c) == ["s0 >= 4 (s0 from L['x'].size(0))", "s0 <= 64 (s0 from L['x'].size(0))"], (
        sym_guards(c))


# ---- convolutions whose fit is a relation ------------------------------------------------------

class ConvPool(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 7, stride=2)  # fits only sizes >= 7
        self.pool = torch.nn.MaxPool2d(3, 2)

    def forward(self, x):
        return self.pool(self.conv(x)).relu()


def test_convolution_whose_fit_needs_a_bound_compiles_once():
    torch.manual_seed(0)
    m = ConvPool().eval()
    c = ptc.compile(m, dynamic=True)
    run_sizes(c, m, lambda n: (torch.randn(2, 3, n, n + 5),), [13, 16, 21, 30])
    assert ncompiles(c) == 1 and not events(c, "static_fallback")
    gs = guards_of(c)
    assert "s2 >= 7 (s2 from L['x'].size(2))" in gs, gs
    assert "s4 >= 2 (s4 from L['x'].size(2) - 5)" in gs, gs  # s2 := s4 + 5 from there on
    assert not events(c, "compile")[0]["specialized"]
    # A size the kernel does not fit is eager's error.
    with pytest.raises(RuntimeError):
        c(torch.randn(2, 3, 5, 9))


def conv_by_weight(x, w):
    return F.conv1d(x, w).relu()  # fits while x's length s2 >= w's kernel s4


def test_kernel_fit_over_two_symbols_takes_a_slack_symbol():
    c = ptc.compile(conv_by_weight, dynamic=True)
    run_sizes(c, conv_by_weight, lambda n: (torch.randn(2, 3, 3 * n), torch.randn(4, 3, n + 2)),
              [3, 5, 9, 14])
    assert ncompiles(c) == 1 and not events(c, "static_fallback")
    assert not events(c, "compile")[0]["specialized"]  # main pinned s2 and s4 per size
    gs = guards_of(c)
    assert "s2-s4 >= 0 (s2 from L['x'].size(2), s4 from L['w'].size(2))" in gs, gs
    # s2 := s5 + s4 - 2 from there on: the runtime binds s5 once w's input bound s4
    assert "s5 >= 2 (s5 from L['x'].size(2) - (s4-2))" in gs, gs
    run_sizes(c, conv_by_weight, lambda n: (torch.randn(2, 3, n), torch.randn(4, 3, n)), [6])
    assert ncompiles(c) == 1  # s2 == s4: one output per row
    with pytest.raises(RuntimeError):  # a kernel longer than the input: eager's error
        c(torch.randn(2, 3, 4), torch.randn(4, 3, 6))


def head_of(x, y):
    return x[:, : x.size(1) - y.size(1)] * 2  # a slice bound over two sizes


def test_slice_bound_over_two_symbols_stays_symbolic():
    c = ptc.compile(head_of, dynamic=True)
    run_sizes(c, head_of, lambda n: (torch.randn(2, 3 * n), torch.randn(7, n)), [3, 5, 9])
    assert ncompiles(c) == 1 and not events(c, "static_fallback")
    assert not events(c, "compile")[0]["specialized"]
    # the other sides of the relation are other entries, as in eager: empty, then from the end
    for a, b in [(6, 6), (5, 8)]:
        x, y = torch.randn(2, a), torch.randn(7, b)
        torch.testing.assert_close(c(x, y), head_of(x, y))


# ---- kernels over symbolic sizes -------------------------------------------------------------

def test_gpt2_every_size_symbolic_matches_eager():
    # A fused add + layer_norm kernel keeps its row in a local buffer [s0,s1,256]
    # whose outer loop is collapsed (o0 < s0*s1): the row is 256 elements. Main
    # sized it from the dims after the first (s1*256, symbolic, so 1 element)
    # and the kernel wrote its rows over the stack (SIGBUS).
    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = T.GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=1000, n_positions=256,
                       bos_token_id=0, eos_token_id=0)
    m = T.GPT2LMHeadModel(cfg).eval()
    c = ptc.compile(m, dynamic=True)
    with torch.no_grad():
        for n in (64, 40, 97):
            ids = torch.randint(0, 1000, (4, n))
            torch.testing.assert_close(c(input_ids=ids).logits, m(input_ids=ids).logits,
                                       rtol=1e-4, atol=1e-4)
    assert ncompiles(c) == 1 and not events(c, "static_fallback")
