"""Externs on the CPU through torch: a convolution's or attention's result
tensor serves as its buffer for the rest of the call (ptc_host.run_extern_new),
instead of being copied into ptc's arena — the copy was 14% of the extern time
of resnet18 b8 on a 2-core CPU."""
import pytest
import torch
import torch.nn.functional as F

import ptc


def copies_in(fn, *args):
    """fn(*args) and the number of aten::copy_ calls of a result's size (torch
    also copies each weight to channels-last for a channels-last input)."""
    with torch.profiler.profile(record_shapes=True) as prof:
        out = fn(*args)
    sizes = [list(o.shape) for o in (out if isinstance(out, tuple) else (out,))]
    return out, sum(e.count for e in prof.key_averages(group_by_input_shape=True)
                    if e.key == "aten::copy_" and e.input_shapes and e.input_shapes[0] in sizes)


def test_conv_results_are_not_copied(dev="cpu"):
    torch.manual_seed(0)
    w1, w2 = torch.randn(8, 3, 3, 3, device=dev), torch.randn(8, 8, 3, 3, device=dev)

    def block(x):
        h = F.relu(F.conv2d(x, w1, padding=1))
        return F.conv2d(h, w2, padding=1).sigmoid() + h

    x = torch.randn(2, 3, 16, 16, device=dev)
    cblock = ptc.compile(block, fullgraph=True)
    with torch.no_grad():
        cblock(x)
        got, copies = copies_in(cblock, x)
        assert copies == 0, "conv results copied into ptc's buffers %d times" % copies
        torch.testing.assert_close(got, block(x), rtol=1e-4, atol=1e-4)


def test_attention_and_conv_results_match_across_calls(dev="cpu"):
    """The kept results live until the call ends and no longer: repeated calls
    with new inputs give eager's results (a buffer pointing at a released
    tensor would not)."""
    torch.manual_seed(1)
    w = torch.randn(4, 4, 1, 1, device=dev)

    def f(q, k, v, img):
        a = F.scaled_dot_product_attention(q, k, v)
        c = F.conv2d(img, w)
        return a * 2 + 1, c.relu() * c

    cf = ptc.compile(f, fullgraph=True)
    with torch.no_grad():
        for _ in range(4):
            args = tuple(torch.randn(*shape, device=dev) for shape in
                         ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8), (1, 4, 6, 6)))
            for g, e in zip(cf(*args), f(*args)):
                torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


def test_extern_results_that_are_outputs_are_not_copied(dev="cpu"):
    """An extern whose result is a graph output (a convolution returned, a
    weight gradient from convolution_backward in a compiled backward) hands
    torch's tensor to the caller: main copied it into a tensor it had
    allocated (7 ms per 9.4 MB gradient of resnet18 on this machine)."""
    torch.manual_seed(2)
    w = torch.randn(8, 3, 3, 3, device=dev)
    x = torch.randn(2, 3, 16, 16, device=dev)
    conv = ptc.compile(lambda t: (F.conv2d(t, w, padding=1), F.conv2d(t + 1, w)), fullgraph=True)
    with torch.no_grad():
        conv(x)
        got, copies = copies_in(conv, x)
        assert copies == 0, "extern outputs copied %d times" % copies
        for g, want in zip(got, (F.conv2d(x, w, padding=1), F.conv2d(x + 1, w))):
            torch.testing.assert_close(g, want, rtol=1e-4, atol=1e-4)
        got2 = conv(x * 2)  # a later call's outputs are new tensors
    torch.testing.assert_close(got[0], F.conv2d(x, w, padding=1), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got2[0], F.conv2d(x * 2, w, padding=1), rtol=1e-4, atol=1e-4)


def test_boolean_attention_masks_give_eagers_results():
    """ptc makes a boolean attention mask additive in its own kernel (torch
    does it inside its attention on every call): eager's results in float32
    and bfloat16, a fully masked row (zeros) included, and no torch.where."""
    g = torch.Generator().manual_seed(0)

    def attend(q, k, v, keep):
        return F.scaled_dot_product_attention(q, k, v, keep)

    c = ptc.compile(attend, fullgraph=True)
    for dtype in (torch.float32, torch.bfloat16):
        q, k, v = (torch.randn(2, 4, 16, 32, generator=g, dtype=dtype) for _ in range(3))
        keep = torch.rand(2, 1, 16, 16, generator=g) > 0.3
        keep[1, 0, 3] = False
        with torch.profiler.profile() as prof:
            got = c(q, k, v, keep)
        assert "aten::where" not in [e.key for e in prof.key_averages()]
        torch.testing.assert_close(got, attend(q, k, v, keep), rtol=1e-5, atol=1e-5)
        assert not got[1, :, 3].any()


def test_an_extern_takes_a_torch_owned_operand_only_as_laid_out(dev="cpu"):
    """An extern's operand in memory a torch tensor owns (an attention's or a
    convolution's result, an output torch allocated) is that tensor itself
    only when the operand is laid out as the tensor is: a transposed view, a
    leading slice at the same address, or an offset slice of it each need
    their own view (the tensor itself would give wrong sizes or values)."""
    torch.manual_seed(2)
    w = torch.randn(8, 8, device=dev)
    k = torch.randn(1, 1, 3, 3, device=dev)

    def f(x, q):
        a = F.scaled_dot_product_attention(q, q * 2, q + 1)  # a result torch owns
        convs = (F.conv2d(a, k), F.conv2d(a.transpose(2, 3), k), F.conv2d(a[:, :, :5], k),
                 F.conv2d(a[:, :, 2:7], k))
        out = torch.mm(x, w)            # an output ptc asks torch for (mm writes it)
        return convs + (out, torch.mm(out.t(), w), torch.mm(out[:4], w),
                        torch.mm(out[2:6], w) * 1)

    cf = ptc.compile(f, fullgraph=True)
    ptc.config.strict = True  # a fallback to torch ops would hide a wrong operand
    try:
        with torch.no_grad():
            for _ in range(3):
                x, q = torch.randn(8, 8, device=dev), torch.randn(1, 1, 8, 8, device=dev)
                for g, e in zip(cf(x, q), f(x, q)):
                    torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
    finally:
        ptc.config.strict = False


def test_attention_over_transposed_heads_is_read_in_place():
    """Hugging Face's attention: q, k, v are [B, L, H, E] views transposed to
    [B, H, L, E], and the result is transposed back and flattened for the
    output projection. torch writes that result with L outside H, so ptc
    stores it so (the extern's heads_last): no copy into ptc's buffer and no
    kernel copying it out — main made both — and eager's values, forward and
    backward, in float32 and bfloat16."""
    g = torch.Generator().manual_seed(3)
    B, L, H, E = 2, 12, 4, 16

    def block(x, w_qkv, w_out):
        q, k, v = (x @ w_qkv).split(H * E, dim=2)
        q, k, v = (t.view(B, L, H, E).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return a.transpose(1, 2).reshape(B, L, H * E) @ w_out

    cblock = ptc.compile(block, fullgraph=True)
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        args = [(torch.randn(*s, generator=g) / s[-2] ** 0.5).to(dtype) for s in
                ((B, L, H * E), (H * E, 3 * H * E), (H * E, H * E))]
        with torch.no_grad():
            cblock(*args)
            with torch.profiler.profile() as prof:
                got = cblock(*args)
        copies = [e.key for e in prof.key_averages() if e.key in ("aten::copy_", "aten::clone")]
        assert copies == [], copies
        torch.testing.assert_close(got, block(*args), rtol=tol, atol=tol)
        grads = []
        for fn in (block, cblock):
            leaves = [a.clone().requires_grad_() for a in args]
            fn(*leaves).square().sum().backward()
            grads.append([a.grad for a in leaves])
        for ge, gc in zip(*grads):
            scale = ge.abs().max().item()
            torch.testing.assert_close(gc, ge, rtol=tol * 10, atol=tol * 10 * scale)


def test_attention_over_unbound_qkv_heads_is_read_in_place():
    """timm's attention: q, k, v are unbound from one [B, L, 3, H, E] view
    permuted to [3, B, H, L, E]. torch writes the result with L outside H
    there too, so it is stored heads last: no copy into ptc's buffer and no
    kernel copying it out for the projection (main made both: vit_tiny spent
    4.6% of a call in those kernels), and eager's values."""
    g = torch.Generator().manual_seed(4)
    B, L, H, E = 2, 9, 3, 8

    def block(x, w_qkv, w_out):
        qkv = (x @ w_qkv).reshape(B, L, 3, H, E).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        a = F.scaled_dot_product_attention(q, k, v)
        return a.transpose(1, 2).reshape(B, L, H * E) @ w_out

    cblock = ptc.compile(block, fullgraph=True)
    args = [torch.randn(*s, generator=g) / s[-2] ** 0.5 for s in
            ((B, L, H * E), (H * E, 3 * H * E), (H * E, H * E))]
    with torch.no_grad():
        cblock(*args)
        with torch.profiler.profile() as prof:
            got = cblock(*args)
    copies = [e.key for e in prof.key_averages() if e.key in ("aten::copy_", "aten::clone",
                                                               "aten::contiguous")]
    assert copies == [], copies
    torch.testing.assert_close(got, block(*args), rtol=1e-5, atol=1e-5)


HEADS_LAST = """# ptc ir v1
graph f(%q: f32[2,3,5,4] cpu, %k: f32[2,3,6,4] cpu, %v: f32[2,3,6,7] cpu) {
  %0 = scaled_dot_product_attention(%q, %k, %v, heads_last=true) : f32[2,5,3,7]
  %1 = scaled_dot_product_attention(%q, %k, %v) : f32[2,3,5,7]
  %2 = transpose(%1, 1, 2) : f32[2,5,3,7]
  %3 = sub(%0, %2) : f32[2,5,3,7]
  return (%3)
}
"""


def test_heads_last_attention_is_the_transposed_result(tmp_path):
    """The extern's heads_last result is attention's [B, H, L, E] result
    transposed to [B, L, H, E], exactly, in the reference kernel and in the
    CPU backend (ptc's C kernel without torch), whose outputs --check
    compares."""
    import ptcio
    path = tmp_path / "heads_last.ptir"
    path.write_text(HEADS_LAST)
    for backend in ("reference", "cpu"):
        r = ptcio.ptc_run("--backend", backend, "--check", path)
        assert r.returncode == 0, r.stderr
        assert "min=0 max=0" in r.stdout, r.stdout


@pytest.mark.parametrize("beta,alpha", [(1, 1), (1.0, 1.0), (0.5, 2), (0, 1), (1, -1.5)])
def test_addmm_takes_its_beta_and_alpha_left_out_only_at_their_defaults(beta, alpha):
    """torch's addmm is called without the keywords that are at torch's own
    defaults (beta=1, alpha=1: parsing them was a fifth of a small addmm's
    host time); other values (lowered as mm and a pointwise kernel) keep
    their meaning."""
    torch.manual_seed(0)
    c, a, b = torch.randn(5), torch.randn(3, 4), torch.randn(4, 5)

    def f(c, a, b):
        return torch.addmm(c, a, b, beta=beta, alpha=alpha) * 2

    with torch.no_grad():
        got = ptc.compile(f, fullgraph=True)(c, a, b)
    torch.testing.assert_close(got, f(c, a, b))
