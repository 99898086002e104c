"""Shape reasoning under symbolic sizes on CUDA tensors (skipped without a
GPU): the relations test_dynamic_relations.py pins on the CPU — equal
expressions unified (s1 := 2*s0), a width split in heads (s2 := 4*s4), a
convolution whose kernel fits from a bound up (s2 := s4 + 5) — compile one
symbolic entry that the CUDA backend runs for every size, matching eager.
The symbols made by a split or a shift reach the kernels as arguments bound
from the input's size (4*s4, s4+5)."""
import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402
from test_dynamic_relations import ConvPool, doubled_plus, fours, heads  # noqa: E402

DEV = "cuda"


@pytest.fixture(autouse=True)
def _needs_cuda(monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    # conv_bound at 1e-4: cudnn picks a TF32 algorithm for ptc's channels-last
    # input (5.6e-4 from float64) where eager's NCHW one gets an exact one
    # (7e-7); with TF32 off both are within 1e-6 of float64 (H100).
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    ptc.reset()


def events(compiled, kind):
    handle = getattr(compiled, "_ptc_compiled", compiled)
    return [e for e in handle._events() if e["kind"] == kind]


def cases():
    torch.manual_seed(0)
    conv = ConvPool().eval().to(DEV)
    return [
        ("unify", doubled_plus, lambda n: (torch.randn(n, device=DEV), torch.randn(2 * n, device=DEV))),
        ("divides", fours, lambda n: (torch.randn(n, 4 * n + 4, device=DEV),)),
        ("heads", heads, lambda n: (torch.randn(2, n, 8 * n, device=DEV),)),
        ("conv_bound", conv, lambda n: (torch.randn(2, 3, n + 10, n + 15, device=DEV),)),
    ]


@pytest.mark.parametrize("name", ["unify", "divides", "heads", "conv_bound"])
def test_relations_compile_once_on_cuda(name):
    (_, fn, make), = [c for c in cases() if c[0] == name]
    c = ptc.compile(fn, dynamic=True)
    with torch.no_grad():
        for n in (3, 5, 8, 13, 40):
            args = make(n)
            torch.testing.assert_close(c(*args), fn(*args), rtol=1e-4, atol=1e-4)
    assert not events(c, "static_fallback"), events(c, "static_fallback")
    assert len(events(c, "compile")) == 1, [e["reason"] for e in events(c, "compile")]
