"""Dynamic shapes on CUDA tensors (skipped without a GPU): functions and a
small GPT-2 called with growing batch and sequence sizes match eager with at
most 2 compiles (static, then one symbolic entry), and the CUDA backend runs
the symbolic graph itself: a trace whose symbolic graph the backend could not
compile would show as a static_fallback event, and the test names its
reason."""
import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402

DEV = "cuda"


@pytest.fixture(autouse=True)
def _needs_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    ptc.reset()


def events(compiled, kind):
    handle = getattr(compiled, "_ptc_compiled", compiled)
    return [e for e in handle._events() if e["kind"] == kind]


def rows_softmax(x):
    return (x[:, : x.size(1) // 2] * 2).softmax(-1).sum(0)


def norm_rows(x, w):
    h = torch.nn.functional.layer_norm(x, (x.shape[-1],)) @ w
    return torch.relu(h).mean(0)


@pytest.mark.parametrize("fn", [rows_softmax, norm_rows])
def test_functions_over_sizes(fn):
    w = torch.randn(32, 16, device=DEV)
    c = ptc.compile(fn)
    for n in (8, 24, 100, 1000, 4097):
        x = torch.randn(n, 32, device=DEV) if fn is norm_rows else torch.randn(5, 2 * n, device=DEV)
        args = (x, w) if fn is norm_rows else (x,)
        torch.testing.assert_close(c(*args), fn(*args), rtol=1e-4, atol=1e-4)
    assert not events(c, "static_fallback"), events(c, "static_fallback")
    assert len(events(c, "compile")) == 2


def test_gpt2_sequence_lengths():
    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = T.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=256,
                       bos_token_id=0, eos_token_id=0)
    model = T.GPT2LMHeadModel(cfg).eval().to(DEV)
    c = ptc.compile(model)
    with torch.no_grad():
        for L in (8, 12, 40, 128, 33):
            ids = torch.randint(0, 1000, (2, L), device=DEV)
            want = model(input_ids=ids, use_cache=False).logits
            got = c(input_ids=ids, use_cache=False).logits
            torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
    assert not events(c, "static_fallback"), events(c, "static_fallback")
    assert len(events(c, "compile")) == 2


def test_conv_size_arguments_on_cuda():
    """An extern with symbolic arguments (test_dynamic_externs.py on the CPU):
    torch's CUDA convolution runs with the stride and padding evaluated per call."""
    from test_dynamic_externs import conv_from_length

    w = torch.randn(4, 3, 3, device=DEV)
    c = ptc.compile(conv_from_length)
    for L in (8, 12, 20, 33, 64):
        x = torch.randn(2, 3, L, device=DEV)
        torch.testing.assert_close(c(x, w), conv_from_length(x, w), rtol=1e-4, atol=1e-4)
    assert not events(c, "static_fallback"), events(c, "static_fallback")
    assert len(events(c, "compile")) == 2, [e["reason"] for e in events(c, "compile")]
