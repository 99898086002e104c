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
