"""The CUDA backend's plan for kernels over symbolic sizes, read from the PTX
ptc-run emits (no GPU needed): a symbolic kernel is planned for the sizes its
symbols stand for, as a static kernel of such sizes is. A collapsed outer
range 3072*s0*s1 (GPT-2's MLP activation over [s0, s1, 3072]) is millions of
elements with each symbol at the planner's assumed 64 — main planned it as 64
elements (the whole expression taken as one symbol's size) and gave its flat
kernel 128-thread blocks where the static kernel of [64, 64, 3072] gets 256."""
import re

import ptcio

GRAPH = """# ptc ir v1
graph f(%x: f32[{a},{b},3072] cpu) {{
  %0 = mul(%x, %x) : f32[{a},{b},3072]
  %1 = tanh(%0) : f32[{a},{b},3072]
  return (%1)
}}
"""


def block_sizes(tmp_path, a, b):
    path = tmp_path / ("g_%s_%s.ptir" % (a, b))
    path.write_text(GRAPH.format(a=a, b=b))
    r = ptcio.ptc_run("--emit=ptx", "--backend", "cuda", path)
    assert r.returncode == 0, r.stderr
    return [int(n) for n in re.findall(r"\.maxntid (\d+), 1, 1", r.stdout)]


def test_flat_symbolic_kernel_gets_the_blocks_of_its_sizes(tmp_path):
    static = block_sizes(tmp_path, 64, 64)
    assert static and set(static) == {256}, static
    assert block_sizes(tmp_path, "s0", "s1") == static


RESIDUAL_LAYER_NORM = """# ptc ir v1
graph f(%x: f32[4,{L},768] cpu, %y: f32[4,{L},768] cpu, %w: f32[768] cpu, %b: f32[768] cpu) {{
  %0 = add(%x, %y) : f32[4,{L},768]
  %1 = layer_norm(%0, normalized_shape=[768], weight=%w, bias=%b) : f32[4,{L},768]
  return (%0, %1)
}}
"""


def cuda_kernels(tmp_path, L):
    path = tmp_path / ("ln_%s.ptir" % L)
    path.write_text(RESIDUAL_LAYER_NORM.format(L=L))
    r = ptcio.ptc_run("--emit=kernels", "--backend", "cuda", path)
    assert r.returncode == 0, r.stderr
    return re.findall(r"^kernel \d+ (\S+):", r.stdout, re.M)


def test_a_residual_layer_norm_over_a_few_hundred_rows_is_one_kernel(tmp_path):
    """A GPT-2 block's residual add and layer norm over 4 x L rows of 768: a
    team of threads runs each row, so few rows (fewer than the 1024 outer
    iterations a GPU kernel wants) are no reason to split the add, the
    statistics and the normalisation into three kernels — main did so for
    128..1023 rows, and always over a symbolic length (L assumed 128), where
    Inductor runs one persistent reduction."""
    for L in (8, 50, 196, "s1"):
        assert len(cuda_kernels(tmp_path, L)) == 1, (L, cuda_kernels(tmp_path, L))


def test_a_scalar_sum_does_not_join_a_big_pass(tmp_path):
    """What the few-rows rule guards stays: a loss's sum over all of
    [rows, vocab] run in one outer iteration would be one block's work."""
    path = tmp_path / "sum.ptir"
    path.write_text("""# ptc ir v1
graph f(%x: f32[784,50000] cpu) {
  %0 = exp(%x) : f32[784,50000]
  %1 = sum(%0) : f32[]
  return (%0, %1)
}
""")
    r = ptcio.ptc_run("--emit=kernels", "--backend", "cuda", path)
    assert r.returncode == 0, r.stderr
    assert len(re.findall(r"^kernel ", r.stdout, re.M)) == 2, r.stdout[:2000]


def test_a_symbolic_row_keeps_its_own_pass(tmp_path):
    """A row of symbolic length may be millions of elements ([3, s1] with s1
    715 million in test_gpu_dynamic_index): a team then must not run it in
    one outer iteration, so the row sum keeps a kernel of its own."""
    path = tmp_path / "rows.ptir"
    path.write_text("""# ptc ir v1
graph f(%x: i8[s0,s1] cpu) {
  %0 = mul(%x, 3) : i8[s0,s1]
  %1 = sum(%x, dim=[1]) : i64[s0]
  return (%0, %1)
}
""")
    r = ptcio.ptc_run("--emit=kernels", "--backend", "cuda", path)
    assert r.returncode == 0, r.stderr
    assert len(re.findall(r"^kernel ", r.stdout, re.M)) == 2, r.stdout[:2000]
