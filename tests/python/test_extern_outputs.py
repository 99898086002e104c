"""Outputs and biases around the matmul externs, pinned by the kernels a
call runs (the CPU plan, and the CUDA plan printed by ptc-run without a
GPU) and checked against eager on the CPU.

- A graph output that is a reshape of an extern's result (a linear layer's
  [rows, out] product returned as [batch, length, out]: GPT-2's logits) is
  that result's memory, not a copy of it by a kernel of its own (main
  copied the logits, 25 MB per call at 4 x 196 tokens).
- A bias add that no kernel reads (the sum is read only by externs, through
  views, or returned) goes into the matmul (addmm), on every device: GPT-2's
  qkv projection, read by attention, was a kernel of its own per layer on
  CUDA in float32, and so were BERT's query, key and value biases on both
  devices.
"""
import re

import pytest
import torch

import ptc
import ptcio

def plan(tmp_path, ptir, backend, name="g"):
    """The kernels and externs one call of ptir's graph runs on backend."""
    path = tmp_path / ("%s_%s.ptir" % (name, backend))
    path.write_text(ptcio.ptir_on_cuda(ptir) if backend == "cuda" else ptir)
    r = ptcio.ptc_run("--emit=kernels", "--backend", backend, path)
    assert r.returncode == 0, r.stderr
    kernels = re.findall(r"^kernel \d+ (\S+):", r.stdout, re.M)
    externs = re.findall(r"^extern \d+ (\S+):", r.stdout, re.M)
    return kernels, externs


LINEAR_3D = """# ptc ir v1
graph f(%x: f32[4,{L},64] cpu, %w: f32[100,64] cpu) {{
  %0 = linear(%x, %w) : f32[4,{L},100]
  return (%0)
}}
"""


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
@pytest.mark.parametrize("L", [7, "s0"])
def test_a_reshaped_matmul_result_is_the_output_itself(tmp_path, backend, L):
    kernels, externs = plan(tmp_path, LINEAR_3D.format(L=L), backend)
    assert (kernels, externs) == ([], ["mm"])


QKV = """# ptc ir v1
graph f(%x: f32[2,{L},48] cpu, %w: f32[144,48] cpu, %b: f32[144] cpu) {{
  %0 = linear(%x, %w, %b) : f32[2,{L},144]
  %1, %2, %3 = split(%0, split_size=48, dim=2) : f32[2,{L},48], f32[2,{L},48], f32[2,{L},48]
  %4 = view(%1, size=[2, {L}, 4, 12]) : f32[2,{L},4,12]
  %5 = transpose(%4, dim0=1, dim1=2) : f32[2,4,{L},12]
  %6 = view(%2, size=[2, {L}, 4, 12]) : f32[2,{L},4,12]
  %7 = transpose(%6, dim0=1, dim1=2) : f32[2,4,{L},12]
  %8 = view(%3, size=[2, {L}, 4, 12]) : f32[2,{L},4,12]
  %9 = transpose(%8, dim0=1, dim1=2) : f32[2,4,{L},12]
  %10 = scaled_dot_product_attention(%5, %7, %9, is_causal=true) : f32[2,4,{L},12]
  %11 = transpose(%10, dim0=1, dim1=2) : f32[2,{L},4,12]
  %12 = reshape(%11, shape=[2, {L}, 48]) : f32[2,{L},48]
  return (%12)
}}
"""


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_a_bias_only_attention_reads_goes_into_the_matmul(tmp_path, backend):
    kernels, externs = plan(tmp_path, QKV.format(L=8), backend)
    assert externs == ["addmm", "scaled_dot_product_attention"] and kernels == [], (kernels,
                                                                                  externs)


HEAD = """# ptc ir v1
graph f(%x: f32[16,48] cpu, %w: f32[10,48] cpu, %b: f32[10] cpu) {
  %0 = linear(%x, %w, %b) : f32[16,10]
  return (%0)
}
"""


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_a_returned_biased_product_is_one_addmm(tmp_path, backend):
    """A classifier head's logits: addmm writes the output (main, on CUDA in
    float32: an mm, then a kernel adding the bias into the output)."""
    assert plan(tmp_path, HEAD, backend) == ([], ["addmm"])


GELU_MLP = """# ptc ir v1
graph f(%x: f32[16,48] cpu, %w: f32[96,48] cpu, %b: f32[96] cpu) {
  %0 = linear(%x, %w, %b) : f32[16,96]
  %1 = gelu(%0) : f32[16,96]
  return (%1)
}
"""


SHARED = """# ptc ir v1
graph f(%x: f32[16,48] cpu, %w: f32[96,48] cpu, %b: f32[96] cpu, %w2: f32[96,96] cpu) {
  %0 = linear(%x, %w, %b) : f32[16,96]
  %1 = gelu(%0) : f32[16,96]
  %2 = mm(%0, %w2) : f32[16,96]
  return (%1, %2)
}
"""


@pytest.mark.parametrize("graph", [GELU_MLP, SHARED], ids=["gelu", "gelu_and_mm"])
def test_a_bias_a_kernel_reads_stays_in_the_kernel_on_cuda_float32(tmp_path, graph):
    """What the float32 CUDA rule keeps: a kernel reading the sum (the gelu)
    adds the bias, also where an extern reads the sum too."""
    kernels, externs = plan(tmp_path, graph, "cuda")
    assert "addmm" not in externs and len(kernels) >= 1, (kernels, externs)


# ---- against eager on the CPU ---------------------------------------------------------------


def test_a_linear_output_is_eagers_tensor():
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 24)
    fn = ptc.compile(lambda x: lin(x))
    with torch.no_grad():
        for L in (5, 5, 9, 11):  # a recompile, then a symbolic length
            x = torch.randn(3, L, 16)
            out, want = fn(x), lin(x)
            torch.testing.assert_close(out, want)
            assert out.shape == want.shape and out.stride() == want.stride()
            # (eager's is a view of its 2-d addmm result, ._base that; ptc's
            # is a tensor of its own, ._base None, as when it was a copy)
            assert out.is_contiguous() and out._base is None
            again = fn(x)
            assert again.data_ptr() != out.data_ptr()  # each call's own tensor
            out.add_(1)  # the user's to change
            torch.testing.assert_close(again, want)
            torch.testing.assert_close(out, want + 1)


def test_a_linear_output_trains_like_eager():
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 24)
    x = torch.randn(3, 5, 16)
    want = lin(x)
    want.square().sum().backward()
    grads = [p.grad.clone() for p in lin.parameters()]
    lin.zero_grad()
    out = ptc.compile(lambda x: lin(x))(x)
    assert out.shape == want.shape and out.requires_grad and out.stride() == want.stride()
    torch.testing.assert_close(out, want)
    out.square().sum().backward()
    for p, g in zip(lin.parameters(), grads):
        torch.testing.assert_close(p.grad, g)


def test_attention_over_a_biased_projection_matches_eager():
    torch.manual_seed(0)
    qkv = torch.nn.Linear(48, 144)

    def attend(x):
        q, k, v = qkv(x).split(48, dim=2)
        heads = [t.view(2, x.shape[1], 4, 12).transpose(1, 2) for t in (q, k, v)]
        return torch.nn.functional.scaled_dot_product_attention(*heads, is_causal=True), k

    fn = ptc.compile(attend)
    with torch.no_grad():
        for L in (8, 8, 13, 6):
            x = torch.randn(2, L, 48)
            (out, k), (want, want_k) = fn(x), attend(x)
            torch.testing.assert_close(out, want)
            torch.testing.assert_close(k, want_k)


# ---- GPT-2 ---------------------------------------------------------------------------------


def test_gpt2_runs_three_kernels_per_layer(tmp_path):
    """A 2-layer GPT-2 captured on the CPU, planned for the CPU and for CUDA:
    per layer the qkv addmm, attention and three more matmuls, and three
    kernels (the residual + layer norm after attention, the MLP's bias +
    gelu, the residual + the next layer norm); the logits are the lm_head's
    result, not a copy. Main ran the logits copy on both devices and, on
    CUDA, the qkv bias add as a kernel of its own per layer."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=96, n_head=4, vocab_size=300, n_positions=64)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    trace = tmp_path / "trace"
    fn = ptc.compile(lambda ids: model(input_ids=ids).logits)
    ids = torch.randint(0, 300, (4, 24))
    ptc.config.trace_dir = str(trace)
    try:
        with torch.no_grad():
            torch.testing.assert_close(fn(ids), model(input_ids=ids).logits)
    finally:
        ptc.config.trace_dir = ""
    (captured,) = list(trace.glob("*/captured.ptir"))
    for backend in ("cpu", "cuda"):
        kernels, externs = plan(tmp_path, captured.read_text(), backend, "gpt2")
        assert not [k for k in kernels if "copy" in k], kernels
        assert len(externs) == 2 * 5 + 1, externs
        assert externs.count("scaled_dot_product_attention") == 2
        assert len(kernels) == 1 + 2 * 3, (backend, kernels)
