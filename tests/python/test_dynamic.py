"""Dynamic shapes from ptc.compile's dynamic= option through capture and guards.

A corpus of functions and modules called with growing batch and sequence
sizes: outputs equal eager, dynamic=None compiles twice (static, then one
symbolic entry for every later size), dynamic=True once, dynamic=False once
per size. Sizes 0 and 1 are specialised. mark_dynamic (ptc's and
torch._dynamo's) with min/max, mark_static, a Python branch on a size (a
named guard on the relation), a value that must be concrete (specialised,
with the source line in ptc.explain), the fallback to static sizes with its
reason, and data-dependent ops ending the graph with PTC-B008. HF GPT-2
generate() with its growing KV cache and BERT over varying sequence lengths
match eager with at most 2 compiles.
"""
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import ptc  # noqa: E402


@pytest.fixture(autouse=True)
def _reset():
    ptc.reset()
    yield
    ptc.config.logs = ""


def events(compiled, kind):
    handle = getattr(compiled, "_ptc_compiled", compiled)
    return [e for e in handle._events() if e["kind"] == kind]


def ncompiles(compiled):
    return len(events(compiled, "compile"))


def guards_of(compiled, i=-1):
    return events(compiled, "compile")[i]["guards"]


# ---- the corpus ------------------------------------------------------------------------

def mlp_sizes(x, w):
    n = x.size(0)
    h = x.view(n, -1) @ w
    return torch.relu(h).reshape(x.shape[0], 2, -1).sum(1)


def halves(x):
    d = x.size(1) // 2
    return x[:, :d].sum(1) + x[:, d:].amax(1)


def positions(x):
    L = x.shape[1]
    pos = torch.arange(L)
    return x + pos[None, :, None].to(x.dtype) * 0.1


def expand_mask(x):
    B, T, C = x.shape
    m = torch.ones(T, T).tril().view(1, T, T).expand(B, T, T)
    return m @ x


def last_token(x):
    n = len(x)
    return x[:, -1] + x[n - 1] + x[2]


def zeros_like_rows(x):
    return x.new_zeros(x.size(0), 3) + x.sum(-1, keepdim=True)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(16)
        self.qkv = nn.Linear(16, 48)
        self.out = nn.Linear(16, 16)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(self.ln(x)).split(C, dim=-1)
        q = q.view(B, T, 4, C // 4).transpose(1, 2)
        k = k.view(B, T, 4, C // 4).transpose(1, 2)
        v = v.view(B, T, 4, C // 4).transpose(1, 2)
        a = (q @ k.transpose(-2, -1)) * (1.0 / 2.0)
        a = a.masked_fill(torch.ones(T, T).tril()[None, None] == 0, float("-inf")).softmax(-1)
        y = (a @ v).transpose(1, 2).contiguous().view(B, T, C)
        return x + self.out(y)


def corpus():
    torch.manual_seed(0)
    w = torch.randn(8, 6)
    blk = Block().eval()
    return [
        ("mlp_sizes", mlp_sizes, lambda n: (torch.randn(n, 2, 4), w)),
        ("halves", halves, lambda n: (torch.randn(3, 2 * n),)),
        ("positions", positions, lambda n: (torch.randn(2, n, 4),)),
        ("expand_mask", expand_mask, lambda n: (torch.randn(2, n, 4),)),
        ("last_token", last_token, lambda n: (torch.randn(n, n),)),
        ("zeros_like_rows", zeros_like_rows, lambda n: (torch.randn(n, 5),)),
        ("block", blk, lambda n: (torch.randn(2, n, 16),)),
    ]


SIZES = [3, 5, 8, 13, 21]


def run_sizes(compiled, fn, make, sizes=SIZES):
    with torch.no_grad():
        for n in sizes:
            args = make(n)
            torch.testing.assert_close(compiled(*args), fn(*args), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["ptc", "eager", "reference"])
@pytest.mark.parametrize("name,fn,make", corpus(), ids=[c[0] for c in corpus()])
def test_automatic_dynamic_compiles_twice(name, fn, make, backend):
    c = ptc.compile(fn, backend=backend)
    run_sizes(c, fn, make)
    assert ncompiles(c) == 2, [e["reason"] for e in events(c, "compile")]
    assert not events(c, "static_fallback"), events(c, "static_fallback")
    reason = events(c, "compile")[1]["reason"]
    assert "size change" in reason and "become dynamic" in reason, reason


@pytest.mark.parametrize("name,fn,make", corpus(), ids=[c[0] for c in corpus()])
def test_dynamic_true_compiles_once(name, fn, make):
    c = ptc.compile(fn, dynamic=True)
    run_sizes(c, fn, make)
    # Sizes that must be equal (s1*s2 against a weight's s3, a symbolic C
    # against LayerNorm's 16) are unified under a guard, as torch does.
    assert not events(c, "static_fallback"), events(c, "static_fallback")
    assert ncompiles(c) == 1, [e["reason"] for e in events(c, "compile")]


def test_dynamic_false_specialises_every_size():
    c = ptc.compile(halves, dynamic=False)
    run_sizes(c, halves, lambda n: (torch.randn(3, 2 * n),))
    assert ncompiles(c) == len(SIZES)
    assert not any("s0" in g for g in guards_of(c))


def test_dynamic_rejects_other_values():
    with pytest.raises(ValueError, match="dynamic must be None, True or False"):
        ptc.compile(halves, dynamic="yes")


def test_symbolic_guards_name_the_symbol():
    c = ptc.compile(zeros_like_rows, dynamic=True)
    c(torch.randn(4, 5))
    gs = guards_of(c)
    assert "s0 >= 2 (s0 from L['x'].size(0))" in gs, gs
    assert "L['x']: tensor f32[*,*]{contiguous} cpu" in gs, gs
    # A batch of 1 is specialised: the guard that fails names the symbol and its value.
    c(torch.randn(1, 5))
    (rec,) = events(c, "recompile")
    assert rec["guard"] == "s0 >= 2 (s0 from L['x'].size(0)) (now s0 = 1)", rec["guard"]


def test_zero_and_one_are_specialised():
    c = ptc.compile(zeros_like_rows, dynamic=True)
    run_sizes(c, zeros_like_rows, lambda n: (torch.randn(n, 5),), sizes=[0, 1, 4, 9, 0, 1])
    assert ncompiles(c) == 3  # 0, 1, then one entry for every batch of 2 or more
    assert "L['x']: tensor f32[0,*]{contiguous} cpu" in guards_of(c, 0)
    assert "L['x']: tensor f32[1,*]{contiguous} cpu" in guards_of(c, 1)


def test_equal_sizes_share_a_symbol_under_a_guard():
    def f(x, y):
        return x + y

    c = ptc.compile(f, dynamic=True)
    a, b = torch.randn(4, 6), torch.randn(4, 6)
    torch.testing.assert_close(c(a, b), f(a, b))
    gs = guards_of(c)
    assert "L['y'].size(0) == s0 (s0 from L['x'].size(0))" in gs, gs
    a, b = torch.randn(7, 9), torch.randn(7, 9)
    torch.testing.assert_close(c(a, b), f(a, b))
    assert ncompiles(c) == 1
    # Broadcasting y over x: the sizes differ now, a new entry.
    a, b = torch.randn(7, 9), torch.randn(1, 9)
    torch.testing.assert_close(c(a, b), f(a, b))
    assert ncompiles(c) == 2
    assert "L['y'].size(0) == s0" in events(c, "recompile")[0]["guard"]


def test_python_branch_on_a_size_guards_the_relation():
    def f(x):
        if x.size(0) > 4:
            return x * 2
        return x - 1

    c = ptc.compile(f, dynamic=True)
    run_sizes(c, f, lambda n: (torch.randn(n, 10),), sizes=[6, 7, 9])
    assert ncompiles(c) == 1
    assert "s0 >= 5 (s0 from L['x'].size(0))" in guards_of(c)
    run_sizes(c, f, lambda n: (torch.randn(n, 10),), sizes=[3, 2])
    assert ncompiles(c) == 2
    rec = events(c, "recompile")[0]
    assert rec["guard"] == "s0 >= 5 (s0 from L['x'].size(0)) (now s0 = 3)", rec["guard"]


def test_concrete_use_specialises_with_the_line():
    def f(x):
        n = x.size(0)
        acc = x.sum(0)
        for i in range(1, n):  # a loop bound needs the number
            acc = acc * 0.5 + i
        return acc

    c = ptc.compile(f, dynamic=True)
    x = torch.randn(4, 3)
    torch.testing.assert_close(c(x), f(x))
    assert "s0 == 4 (s0 from L['x'].size(0))" in guards_of(c)
    (spec,) = events(c, "compile")[0]["specialized"]
    assert spec["expr"] == "s0" and spec["value"] == 4 and "range(1, n)" in spec["text"], spec
    x = torch.randn(6, 3)
    torch.testing.assert_close(c(x), f(x))
    assert ncompiles(c) == 2


def test_a_size_in_tensor_arithmetic_stays_symbolic():
    # transformers' masks: torch.arange(q_length) + q_offset with the cache's
    # length; main specialised it ("a number in a tensor op") and recompiled
    # for every length
    def f(x, past):
        n = past.size(2)
        q = torch.arange(x.size(1)) + n
        return x * 2 + q, (x - n) * n, n - x, (x.int() + n)

    c = ptc.compile(f, dynamic=True)
    for length in (3, 4, 5, 9):
        x, past = torch.randn(2, 5), torch.zeros(1, 1, length)
        for got, want in zip(c(x, past), f(x, past)):
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want)
    assert ncompiles(c) == 1
    assert events(c, "compile")[0]["specialized"] == []


def compares_with_its_size(x):
    n = x.size(0)
    return x == n, x != n, x < n, n > x, torch.arange(6) <= n


@pytest.mark.parametrize("dynamic", [True, None])
def test_a_tensor_compared_with_a_size_is_a_tensor(dynamic):
    # main: x == n with n symbolic was the Python bool False (x != n True),
    # a silent wrong result on the second size under the default automatic
    # dynamic, and x < n broke (PTC-B022)
    c = ptc.compile(compares_with_its_size, dynamic=dynamic)
    for length in (3, 4, 6):
        x = torch.arange(length * 2).reshape(length, 2) % 5
        got, want = c(x), compares_with_its_size(x)
        for g, w in zip(got, want):
            assert torch.is_tensor(g) and torch.equal(g, w)
    assert not [e for e in events(c, "compile") if e["break"]]


def test_a_size_times_a_bf16_tensor_is_not_rounded_to_bf16_first():
    # a bf16 0-d tensor holding 301 holds 300: eager multiplies by 301
    def f(x, past):
        return x * past.size(0)

    c = ptc.compile(f, dynamic=True)
    x = torch.randn(64).bfloat16() * 3
    for length in (301, 1027):
        past = torch.zeros(length)
        assert torch.equal(c(x, past), f(x, past))


def test_sizes_kept_past_the_graph_are_values():
    def f(x):
        return x * 2, x.size(0), x.shape

    c = ptc.compile(f, dynamic=True)
    out, n, shape = c(torch.ones(5, 2))
    assert n == 5 and type(n) is int and shape == (5, 2)
    out, n, shape = c(torch.ones(6, 2))
    assert n == 6 and shape == (6, 2)


def test_gradients_over_sizes():
    # A graph needing gradients runs through torch ops (the eager program):
    # its symbolic sizes take each call's values.
    torch.manual_seed(0)
    blk = Block()
    ref = Block()
    ref.load_state_dict(blk.state_dict())
    c = ptc.compile(blk)
    for n in (3, 5, 8):
        x = torch.randn(2, n, 16)
        c(x).square().sum().backward()
        ref(x).square().sum().backward()
        for p, q in zip(blk.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    assert ncompiles(c) == 2


# ---- marks -------------------------------------------------------------------------------

@pytest.mark.parametrize("api", ["ptc", "torch"])
def test_mark_dynamic_from_the_first_call(api):
    mark = ptc.mark_dynamic if api == "ptc" else pytest.importorskip("torch._dynamo").mark_dynamic
    c = ptc.compile(halves)
    for n in SIZES:
        x = torch.randn(n, 4)
        mark(x, 0)
        torch.testing.assert_close(c(x), halves(x))
    assert ncompiles(c) == 1
    assert "L['x']: tensor f32[*,4]{contiguous} cpu" in guards_of(c)


def test_mark_dynamic_range_recompiles_outside_it():
    c = ptc.compile(halves)
    for n in (4, 6, 8):
        x = torch.randn(n, 4)
        ptc.mark_dynamic(x, 0, min=4, max=8)
        torch.testing.assert_close(c(x), halves(x))
    assert ncompiles(c) == 1
    gs = guards_of(c)
    assert "s0 >= 4 (s0 from L['x'].size(0))" in gs and "s0 <= 8 (s0 from L['x'].size(0))" in gs, gs
    x = torch.randn(12, 4)
    ptc.mark_dynamic(x, 0, min=4, max=8)
    torch.testing.assert_close(c(x), halves(x))
    assert ncompiles(c) == 2
    assert "L['x']: tensor f32[12,4]{4,1} cpu" in guards_of(c)  # outside: specialised


def test_maybe_mark_dynamic_and_mark_static():
    c = ptc.compile(halves, dynamic=True)
    x = torch.randn(5, 4)
    ptc.mark_static(x, 0)
    c(x)
    assert "L['x']: tensor f32[5,*]{contiguous} cpu" in guards_of(c)
    c2 = ptc.compile(halves)
    y = torch.randn(5, 4)
    ptc.maybe_mark_dynamic(y, 1)
    c2(y)
    assert "L['x']: tensor f32[5,*]{contiguous} cpu" in guards_of(c2)


def test_mark_dynamic_under_dynamic_false_warns():
    c = ptc.compile(halves, dynamic=False)
    x = torch.randn(5, 4)
    ptc.mark_dynamic(x, 0)
    with pytest.warns(UserWarning, match="mark_dynamic on L\\['x'\\] is ignored"):
        c(x)


# ---- fallbacks and data-dependent sizes -----------------------------------------------------

def test_symbolic_failure_falls_back_to_static_with_a_reason():
    def f(x):
        return torch.stack([col * 2 for col in x.t()]).sum(0)  # iterating needs size(1)

    c = ptc.compile(f, dynamic=True)
    run_sizes(c, f, lambda n: (torch.randn(n, 8),))
    (fb,) = events(c, "static_fallback")[:1]
    assert "iteration" in fb["why"] and "where sizes changed" in fb["then"], fb
    assert ncompiles(c) == 2  # static first, then the batch dim that changed


@pytest.mark.parametrize("op", ["nonzero", "mask", "unique"])
def test_data_dependent_sizes_break_the_graph(op):
    def f(x):
        y = x * 2
        if op == "nonzero":
            z = torch.nonzero(y > 0).float().sum()
        elif op == "mask":
            z = y[y > 0].sum()
        else:
            z = torch.unique(y.round()).sum()
        return (y + z).relu()

    c = ptc.compile(f, dynamic=True)
    for n in (4, 7, 9):
        x = torch.randn(n, 3)
        torch.testing.assert_close(c(x), f(x))
    brks = [e["break"] for e in events(c, "compile") if e["break"]]
    assert brks and all(b["code"] == "PTC-B008" for b in brks), brks
    graphs = [e for e in events(c, "compile") if e["nodes"] > 0]
    assert len(graphs) >= 2  # the ops before and after the break compiled


# ---- Hugging Face models ----------------------------------------------------------------------

def test_gpt2_generate_growing_kv_cache():
    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = T.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=128,
                       bos_token_id=0, eos_token_id=0)
    model = T.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(1, 1000, (1, 6), generator=torch.Generator().manual_seed(0))
    want = model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0)
    model.forward = ptc.compile(model.forward)
    got = model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert torch.equal(got, want)
    n = ncompiles(model.forward)
    assert n <= 2, [e["reason"] for e in events(model.forward, "compile")]


def test_bert_varying_sequence_length():
    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = T.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                       vocab_size=1000)
    model = T.BertModel(cfg).eval()
    c = ptc.compile(model)
    with torch.no_grad():
        for L in (8, 12, 20, 33, 17):
            ids = torch.randint(0, 1000, (2, L), generator=torch.Generator().manual_seed(L))
            mask = torch.ones(2, L, dtype=torch.long)
            want = model(input_ids=ids, attention_mask=mask).last_hidden_state
            got = c(input_ids=ids, attention_mask=mask).last_hidden_state
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert ncompiles(c) <= 2, [e["reason"] for e in events(c, "compile")]
