"""Aligned matmul operands (compiler/lower/pad.c): every matrix an mm or bmm
reads or writes gets a leading dimension of a multiple of 16 bytes, so that
cuBLAS picks its aligned kernels (GPT-2's LM head, 50257 columns, ran the
align1 cutlass kernels at 1.1-1.7 ms each on an H200 where Inductor's padded
operands ran nvjet kernels at 0.2 ms). Temporaries get padded rows; graph
inputs and outputs keep the user's layout and are copied to or from padded
temporaries where the matmul pays for the copy. On for CUDA by default (the
plans are read from ptc-run --emit=kernels, no GPU needed); PTC_PAD_MM=1 runs
the same plans on the CPU, where results must equal eager's."""
import os
import re

import pytest
import torch
import torch.nn.functional as F

import ptc
import ptcio

LM_HEAD = """# ptc ir v1
graph f(%h: {dt}[{m},{k}] cpu, %w: {dt}[{n},{k}] cpu) {{
  %0 = prims.permute(%w, dims=[1, 0]) : {dt}[{k},{n}]
  %1 = mm(%h, %0) : {dt}[{m},{n}]
  return (%1)
}}
"""

LM_HEAD_GRADS = """# ptc ir v1
graph f(%g: bf16[2048,50257] cpu, %w: bf16[50257,768] cpu, %h: bf16[2048,768] cpu) {
  %0 = mm(%g, %w) : bf16[2048,768]
  %1 = prims.permute(%g, dims=[1, 0]) : bf16[50257,2048]
  %2 = mm(%1, %h) : bf16[50257,768]
  %3 = prims.convert_element_type(%2, dtype=f32) : f32[50257,768]
  return (%0, %3)
}
"""

MM = re.compile(r"^  n\d+ (?:mm|bmm)\((buf\d+)\[([^\]]*)\]\{([^}]*)\}, "
                r"(buf\d+)\[([^\]]*)\]\{([^}]*)\}\) -> (buf\d+)", re.M)


def cuda_plan(tmp_path, text, *env):
    path = tmp_path / "g.ptir"
    path.write_text(text)
    r = ptcio.ptc_run("--emit=kernels", "--backend", "cuda", path)
    assert r.returncode == 0, r.stderr
    return r.stdout


def matmuls(kernels):
    """Per mm/bmm: ((buf, sizes, strides) per operand, result buffer)."""
    ints = lambda s: [int(v) for v in s.split(",")]  # noqa: E731
    return [(((m[0], ints(m[1]), ints(m[2])), (m[3], ints(m[4]), ints(m[5]))), m[6])
            for m in MM.findall(kernels)]


def rows(kernels):
    """{buffer: padded row length} from the memory plan."""
    return {b: int(n) for b, n in re.findall(r"^  (buf\d+): \S+ rows of (\d+)", kernels, re.M)}


def steps(kernels):
    return re.findall(r"^kernel \d+ \S+?_(\w+):|^extern \d+ (\S+):", kernels, re.M)


def leading_dim(sizes, strides):
    return strides[-2] if strides[-1] == 1 else strides[-1]


def test_lm_head_result_is_written_padded_and_copied_into_the_users_logits(tmp_path):
    """GPT-2's forward returns its logits: the user's tensor keeps eager's
    contiguous rows of 50257, the matmul writes rows of 50264 (16-byte
    aligned bf16) and one kernel after it copies them into the output. The
    matmul runs over N = 50264 (W, a graph input, is read from a copy with
    7 rows added), into the rows' padding, which the copy does not read."""
    k = cuda_plan(tmp_path, LM_HEAD.format(dt="bf16", m=2048, k=768, n=50257))
    (ops, out), = matmuls(k)
    assert rows(k) == {out: 50264}
    assert steps_named(k) == ["k0_pad_zero_rows", "k1_unpad_rows"]
    assert [sz for _, sz, _ in ops] == [[2048, 768], [768, 50264]]
    assert re.search(r"^  %s: bf16\[2048,50264\] rows of 50264" % out, k, re.M)
    # the copy writes the output contiguous, reading the padded rows
    assert re.search(r"-> buf\d+\[50257\*o0 \+ o1\]:bf16", k)
    assert re.search(r"load %s\[50264\*o0 \+ o1\]" % out, k)


LM_HEAD_CAST = """# ptc ir v1
graph f(%h: bf16[{m},{k}] cpu, %w: f32[{n},{k}] cpu) {{
  %0 = prims.convert_element_type(%w, dtype=bf16) : bf16[{n},{k}]
  %1 = prims.permute(%0, dims=[1, 0]) : bf16[{k},{n}]
  %2 = mm(%h, %1) : bf16[{m},{n}]
  %3 = prims.convert_element_type(%2, dtype=f32) : f32[{m},{n}]
  return (%3)
}}
"""


def test_a_cast_weights_kernel_writes_the_rows_the_matmul_reads(tmp_path):
    """Under autocast without a backward, W's bfloat16 cast is a temporary
    of ptc's own kernel: that kernel runs over 50264 rows, zeros past 50257,
    and the matmul runs over N = 50264 reading them, with no copy; its
    result's rows (of 50264) take the extra columns, which the conversion
    after it does not read."""
    k = cuda_plan(tmp_path, LM_HEAD_CAST.format(m=2048, k=768, n=50257))
    (ops, out), = matmuls(k)
    assert [sz for _, sz, _ in ops] == [[2048, 768], [768, 50264]]
    assert steps_named(k) == ["k0_convert_element_type", "k1_convert_element_type"]
    assert re.search(r"outer \[o0 < 50264, o1 < 768\]", k)  # the cast, zeros past 50257
    assert re.search(r"^  %s: bf16\[50264,768\]" % ops[1][0], k, re.M)
    assert re.search(r"^  %s: bf16\[2048,50264\] rows of 50264" % out, k, re.M)
    assert re.search(r"outer \[o0 < 2048, o1 < 50257\]", k)  # the conversion: N columns


def test_a_cast_weights_extra_rows_on_the_cpu_equal_eager(pad_on_cpu, capfd, device="cpu"):
    """The same plan run on the CPU (PTC_PAD_MM=1): the matmul reads the
    cast's 1008 rows, and the result equals eager's."""
    torch.manual_seed(0)
    h = torch.randn(64, 64, device=device).to(torch.bfloat16)
    w = torch.randn(1001, 64, device=device)

    def head(h, w):
        return (h @ w.to(torch.bfloat16).t()).float()

    ptc.config.logs = "+runtime"
    try:
        got = ptc.compile(head)(h, w)
    finally:
        ptc.config.logs = None
    calls = [ln for ln in capfd.readouterr().err.splitlines() if "extern mm:" in ln]
    assert any("bf16[64,1008] strides (1,64)" in ln for ln in calls), calls
    # a bfloat16 matmul's result: cuBLAS over the padded width may pick
    # another kernel than eager's, one bf16 rounding apart (H200: 1 of 64064)
    torch.testing.assert_close(got, head(h, w), rtol=1.6e-2, atol=1e-5)


LINEAR = """# ptc ir v1
graph f(%x: f32[2048,768] cpu, %w: f32[50257,768] cpu, %b: f32[50257] cpu) {
  %0 = linear(%x, %w, %b) : f32[2048,50257]
  return (%0)
}
"""


def test_linear_with_bias_addmm_result_is_written_padded(tmp_path):
    """An mm and its bias add run as one addmm: its result is padded as an
    mm's (rows of 50260 f32) and copied into the user's output."""
    k = cuda_plan(tmp_path, LINEAR)
    m = re.search(r"^  n\d+ addmm\(buf\d+\[50257\]\{1\}, [^)]*\) -> (buf\d+)", k, re.M)
    assert m, k
    assert rows(k) == {m.group(1): 50260}
    assert re.findall(r"^kernel \d+ (\S+):", k, re.M) == ["k0_unpad_rows"]


def test_a_small_or_aligned_matmul_is_left_as_it_is(tmp_path):
    """A copy costs a launch and a pass over the matrix: a small matmul
    (2*64*1001*64 flops) keeps its misaligned output, and an aligned one
    (50264 columns) has nothing to pad."""
    for m, k, n in ((64, 64, 1001), (2048, 768, 50264)):
        plan = cuda_plan(tmp_path, LM_HEAD.format(dt="bf16", m=m, k=k, n=n))
        assert rows(plan) == {} and "_pad_rows" not in plan and "unpad_rows" not in plan, plan


def test_logits_gradient_input_is_copied_once_for_both_matmuls(tmp_path):
    """The backward of the LM head gets the logits' gradient g as a graph
    input (the loss is another graph): one kernel copies it into rows of
    50264 with zeros past column 50257, and both gradient matmuls
    (grad_h = g @ W and grad_W = g^T @ h) read the copy, row-major and
    transposed, with a leading dim of 50264."""
    k = cuda_plan(tmp_path, LM_HEAD_GRADS)
    assert steps_named(k)[0] == "k0_pad_rows"
    mms = matmuls(k)
    assert len(mms) == 2
    (ga, _, gst), _ = mms[0][0]
    (ta, _, tst), _ = mms[1][0]
    assert ga == ta and gst == [50264, 1] and tst == [1, 50264]
    assert re.search(r"^  %s: bf16\[2048,50264\]" % ga, k, re.M)
    assert re.search(r"load buf\d+\[50257\*o0 \+ o1\] if t\d+ else 0", k)


def unit_extents(operands):
    """Per operand of a matmul: (the extent of its unit-stride dim, its
    leading dim), what decides cuBLAS's alignment (CUTLASS can_implement)."""
    out = []
    for _, sz, st in operands:
        unit = -1 if st[-1] == 1 else -2
        out.append((sz[unit], leading_dim(sz, st)))
    return out


def test_lm_head_gradient_matmuls_run_over_aligned_extents(tmp_path):
    """An aligned leading dim is not enough: cuBLAS's aligned kernels also
    want each operand's unit-stride extent aligned, and g is unit-stride
    along K = 50257 in grad_h and along M = 50257 in grad_W (the align1
    kernels of the H200's profile, 1.7 + 1.2 ms). grad_h runs over K = 50264
    (g's copy is zero past 50257, W is read from a copy with 7 zero rows);
    grad_W over M = 50264, its result a temporary with 7 extra rows that
    the conversion after it does not read."""
    k = cuda_plan(tmp_path, LM_HEAD_GRADS)
    assert steps_named(k) == ["k0_pad_rows", "k1_pad_zero_rows", "k2_convert_element_type"]
    (grad_h_ops, _), (grad_w_ops, grad_w) = matmuls(k)
    for ops in (grad_h_ops, grad_w_ops):
        for extent, ld in unit_extents(ops):
            assert extent % 8 == 0 and ld % 8 == 0, ops
    assert [sz for _, sz, _ in grad_h_ops] == [[2048, 50264], [50264, 768]]
    assert [sz for _, sz, _ in grad_w_ops] == [[50264, 2048], [2048, 768]]
    assert re.search(r"^  %s: bf16\[50264,768\]" % grad_w, k, re.M)
    assert re.search(r"outer \[o0 < %d\]" % (50257 * 768), k)  # the conversion: real rows only


def steps_named(kernels):
    return re.findall(r"^kernel \d+ (\S+):", kernels, re.M)


def test_cpu_default_is_unpadded_and_pad_mm_0_turns_cuda_off(tmp_path, monkeypatch):
    """CPU programs keep their layouts (MKL/oneDNN: no align1 cliff measured
    there); PTC_PAD_MM=0 turns the CUDA default off, a bad value warns."""
    path = tmp_path / "g.ptir"
    path.write_text(LM_HEAD_GRADS)
    cpu = ptcio.ptc_run("--emit=kernels", path)
    assert cpu.returncode == 0 and "pad_rows" not in cpu.stdout
    env = dict(os.environ, PTC_PAD_MM="0")
    exe = os.path.join(ptcio.build_dir(), "tools", "run", "ptc-run")
    import subprocess
    off = subprocess.run([exe, "--emit=kernels", "--backend", "cuda", str(path)],
                         capture_output=True, text=True, env=env)
    assert off.returncode == 0 and "pad_rows" not in off.stdout
    env["PTC_PAD_MM"] = "yes"
    bad = subprocess.run([exe, "--emit=kernels", "--backend", "cuda", str(path)],
                         capture_output=True, text=True, env=env)
    assert "PTC_PAD_MM=yes" in bad.stderr and "pad_rows" in bad.stdout


# ---- a small GPT-2-like model: compiled on the CPU, planned for CUDA ------------------


class TinyLM(torch.nn.Module):
    """Embedding, one MLP block, a tied LM head over an odd vocabulary, and
    the loss in the same graph."""

    def __init__(self, vocab=1001, dim=64):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, dim)
        self.fc = torch.nn.Linear(dim, 4 * dim)
        self.proj = torch.nn.Linear(4 * dim, dim)
        self.ln = torch.nn.LayerNorm(dim)

    def forward(self, ids, labels):
        h = self.wte(ids)
        h = h + self.proj(F.gelu(self.fc(h)))
        logits = self.ln(h) @ self.wte.weight.t()
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))
        return loss, logits


def train_step(model, ids, labels, compiled):
    model.zero_grad()
    run = ptc.compile(model) if compiled else model
    loss, logits = run(ids, labels)
    loss.backward()
    return loss, logits, {n: p.grad.clone() for n, p in model.named_parameters()}


def traced_ptir(tmp_path, name):
    for d, _, files in os.walk(tmp_path):
        if name in files:
            return open(os.path.join(d, name)).read()
    raise AssertionError("no %s under %s" % (name, tmp_path))


def test_tiny_lm_backward_plans_the_logits_gradient_with_padded_rows(tmp_path):
    """The logits' gradient is a temporary of ptc's softmax-backward kernel:
    on CUDA it is stored with rows of 1004 f32 (16 bytes aligned) and both
    gradient matmuls read it through those rows, with no copy; grad_W runs
    over M = 1004 (the rows' padding, results nobody reads), grad_h keeps
    K = 1001 (the kernel leaves the padding unwritten, not zeros)."""
    torch.manual_seed(0)
    model = TinyLM()
    ids, labels = torch.randint(0, 1001, (2, 2, 32))
    ptc.config.trace_dir = str(tmp_path / "trace")
    try:
        train_step(model, ids, labels, True)
    finally:
        ptc.config.trace_dir = None
    backward = ptcio.ptir_on_cuda(traced_ptir(tmp_path / "trace", "backward.ptir"))
    k = cuda_plan(tmp_path, backward)
    padded = rows(k)
    assert padded and set(padded.values()) == {1004}, padded
    assert "pad_rows" not in k
    readers = [(sz, st) for ops, _ in matmuls(k) for b, sz, st in ops if b in padded]
    assert len(readers) == 2, readers
    assert sorted(sz for sz, _ in readers) == [[64, 1001], [1004, 64]], readers
    for sz, st in readers:
        assert leading_dim(sz, st) == 1004, (sz, st)


@pytest.fixture
def pad_on_cpu(monkeypatch):
    monkeypatch.setenv("PTC_PAD_MM", "1")


def test_tiny_lm_training_with_padded_rows_equals_eager(pad_on_cpu, capfd, device="cpu"):
    """The same plans run on the CPU (PTC_PAD_MM=1): kernels write and read
    the padded rows, torch's mm writes them through out=; the loss, logits
    and every gradient equal eager's, and the logits keep eager's strides."""
    torch.manual_seed(0)
    model = TinyLM().to(device)
    ids, labels = torch.randint(0, 1001, (2, 2, 32), device=device)
    want = train_step(model, ids, labels, False)
    ptc.config.logs = "+runtime"
    try:
        got = train_step(model, ids, labels, True)
    finally:
        ptc.config.logs = None
    calls = [ln for ln in capfd.readouterr().err.splitlines() if "extern mm:" in ln]
    print("\n".join(calls))
    # the two gradient matmuls read the logits' gradient through rows of 1004
    assert sum("strides (1004,1)" in ln or "strides (1,1004)" in ln for ln in calls) == 2, calls
    torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-5)
    assert got[1].stride() == want[1].stride()
    for name in want[2]:
        torch.testing.assert_close(got[2][name], want[2][name], rtol=1e-4, atol=1e-5, msg=name)


def test_boundary_copies_on_the_cpu_equal_eager(pad_on_cpu, tmp_path, device="cpu"):
    """Large enough to pay for the copies (2*512*256*2049 flops): an input
    read by two matmuls is copied once into padded rows, a linear's output
    (an addmm) is written padded and copied into the user's tensor, which
    keeps eager's contiguous strides."""
    torch.manual_seed(0)
    g, w, h = (torch.randn(512, 2049, device=device), torch.randn(2049, 256, device=device),
               torch.randn(512, 256, device=device))
    b = torch.randn(2049, device=device)

    def grads(g, w, h):
        return g @ w, g.t() @ h

    def head(h, w, b):
        return F.linear(h, w, b)

    ptc.config.trace_dir = str(tmp_path)
    try:
        got_grads = ptc.compile(grads)(g, w, h)
        got_head = ptc.compile(head)(h, w, b)
    finally:
        ptc.config.trace_dir = None
    for got, want in zip(got_grads, grads(g, w, h)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)
    want = head(h, w, b)
    torch.testing.assert_close(got_head, want, rtol=1e-4, atol=1e-3)
    assert got_head.stride() == want.stride() == (2049, 1)
    texts = [open(os.path.join(d, n)).read() for d, _, fs in os.walk(tmp_path) for n in fs
             if n == "kernels.txt"]
    names = re.findall(r"^kernel \d+ \S+?_((?:un)?pad_rows):", "".join(texts), re.M)
    assert sorted(names) == ["pad_rows", "unpad_rows"], names


def test_c_externs_write_padded_results_through_their_strides(monkeypatch):
    """ptc-run's own addmm (no torch: the C externs) writes a result with
    padded rows through its strides: it wrote the bias and the scaled sum
    contiguous, so a padded [8,10] result (rows of 12) came back wrong from
    row 1 on, as `ptc-run --backend cuda --check` of examples/mlp.ptir did on
    the GPU, where padding is the default."""
    monkeypatch.setenv("PTC_PAD_MM", "1")
    root = os.environ.get("PTC_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
    mlp = os.path.join(root, "examples", "mlp.ptir")
    plan = ptcio.ptc_run("--emit=kernels", mlp)
    assert "padded rows" in plan.stdout, plan.stdout[:400]
    r = ptcio.ptc_run("--check", "--all", mlp)
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]


# ---- HF GPT-2 and BERT with an odd vocabulary: the real loss in the same graph -------


def gpt2_odd_vocab():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=1, n_embd=256, n_head=2, vocab_size=1001,
                                  n_positions=512, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(cfg), torch.randint(0, 1001, (4, 512))


def bert_odd_vocab():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(num_hidden_layers=1, hidden_size=256, num_attention_heads=2,
                                  intermediate_size=1024, vocab_size=1001,
                                  max_position_embeddings=512, hidden_dropout_prob=0,
                                  attention_probs_dropout_prob=0)
    torch.manual_seed(0)
    return transformers.BertForMaskedLM(cfg), torch.randint(0, 1001, (4, 512))


def hf_train_step(model, ids, compiled, amp=False):
    """Loss, gradients and logits of one step (bf16 autocast with amp)."""
    model.zero_grad()
    run = ptc.compile(model) if compiled else model
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        out = run(input_ids=ids, labels=ids)
    out.loss.backward()
    return out.loss, {n: p.grad.clone() for n, p in model.named_parameters()}, out.logits


def traced_graphs(trace, graph):
    name = graph + ".ptir"
    return [open(os.path.join(d, name)).read() for d, _, files in os.walk(trace)
            if name in files]


def lm_head_plans(tmp_path, trace, vocab=1001, padded=1004, graph="backward"):
    """The CUDA plans of the traced graphs, and the matmuls among them
    with an extent of the vocabulary: (operands, result buffer)."""
    plans, lm_head = [], []
    for text in traced_graphs(trace, graph):
        k = cuda_plan(tmp_path, ptcio.ptir_on_cuda(text))
        plans.append(k)
        lm_head += [mm for mm in matmuls(k)
                    if any(n in (vocab, padded) for _, sz, _ in mm[0] for n in sz)]
    return "\n".join(plans), lm_head


def assert_equal_training_step(model, ids, capfd, **tol):
    """Loss and every gradient of a compiled step equal eager's; returns the
    compiled step's extern mm calls (PTC_LOGS=+runtime)."""
    want = hf_train_step(model, ids, False)
    ptc.config.logs = "+runtime"
    try:
        got = hf_train_step(model, ids, True)
    finally:
        ptc.config.logs = None
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    for name in want[1]:
        torch.testing.assert_close(got[1][name], want[1][name], **tol, msg=name)
    return [ln for ln in capfd.readouterr().err.splitlines() if "extern mm:" in ln]


# BERT's tied word embeddings sum two gradients (the embedding's scatter_add
# and the LM head's): 5.5e-5 off eager's (of 0.014) with PTC_PAD_MM=0 too
@pytest.mark.parametrize("make,atol", [(gpt2_odd_vocab, 1e-5), (bert_odd_vocab, 1e-4)],
                         ids=["gpt2", "bert"])
def test_lm_head_gradients_of_a_temporary_are_aligned_and_equal_eager(
        make, atol, pad_on_cpu, tmp_path, capfd):
    """HF's GPT-2 and BERT with labels: the loss is in the model's graph, so
    the logits' gradient g (2048 x 1001 f32) is a temporary of ptc's
    softmax-backward kernel, stored with rows of 1004. That kernel runs over
    the padding too and writes zeros there (no copy, no launch of its own),
    so grad_h = g @ W runs over K = 1004 (W copied with 3 zero rows) and
    grad_W = g^T @ h over M = 1004: every operand of both LM-head gradient
    matmuls has aligned extents and leading dims, in the CUDA plan of the
    traced backward and in the CPU run (PTC_PAD_MM=1), whose loss and
    gradients equal eager's."""
    model, ids = make()
    ptc.config.trace_dir = str(tmp_path / "trace")
    try:
        calls = assert_equal_training_step(model, ids, capfd, rtol=1e-4, atol=atol)
    finally:
        ptc.config.trace_dir = None
    assert any("f32[2048,1004] strides (1004,1)" in ln and "f32[1004,256]" in ln for ln in calls), calls
    assert any("f32[1004,2048] strides (1,1004)" in ln for ln in calls), calls
    plan, lm_head = lm_head_plans(tmp_path, tmp_path / "trace")
    assert len(lm_head) == 2, lm_head
    for ops, _ in lm_head:
        for extent, ld in unit_extents(ops):
            assert extent % 4 == 0 and ld % 4 == 0, ops
    # g's writer runs over the padded rows, zeros past 1001; g is not copied
    assert re.search(r"outer \[o0 < 2048, o1 < 1004\]", plan), plan
    assert "_pad_rows:" not in plan


def test_padding_zeros_are_written_over_nan_memory(pad_on_cpu, capfd, monkeypatch):
    """The arena reuses memory, so the padding's zeros are written by every
    call, not once: with the arena allocated through torch, in segments
    (PTC_ARENA_SEGMENTS=1), torch's deterministic mode fills it with NaN
    bytes (0xff) on every call, and the grad_h matmul, which reads g's
    padding as extra K, still gives eager's gradients twice in a row
    (0 * NaN would be NaN)."""
    monkeypatch.setenv("PTC_ARENA_SEGMENTS", "1")
    model, ids = gpt2_odd_vocab()
    torch.use_deterministic_algorithms(True)
    try:
        assert torch.empty(4, dtype=torch.uint8).tolist() == [255] * 4
        for _ in range(2):
            calls = assert_equal_training_step(model, ids, capfd, rtol=1e-4, atol=1e-5)
            assert any("f32[2048,1004] strides (1004,1)" in ln for ln in calls), calls
    finally:
        torch.use_deterministic_algorithms(False)


def result_shape(kernels, buf):
    """(sizes, padded row length) of buffer buf in the memory plan."""
    m = re.search(r"^  %s: \w+\[([^\]]*)\](?: rows of (\d+))?" % buf, kernels, re.M)
    assert m, buf
    return [int(v) for v in m.group(1).split(",")], int(m.group(2) or 0)


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "bf16"])
@pytest.mark.parametrize("make", [gpt2_odd_vocab, bert_odd_vocab], ids=["gpt2", "bert"])
def test_forward_lm_head_runs_over_aligned_extents_and_equals_eager(
        make, amp, pad_on_cpu, tmp_path, capfd):
    """The forward's logits = h @ W^T, W the tied embedding (1001 rows) read
    transposed: every operand is unit-stride along K = 256 except the
    result, unit-stride along N = 1001, and cuBLAS ran its align1 kernel for
    it (GPT-2 on an H200: 1.7 ms of the step; BERT's 30522: align2). The
    matmul runs over N rounded up: the result's padded rows take the extra
    columns, which nothing reads (the loss and the copy into the user's
    logits run over 1001), and W (a graph input in fp32, under autocast ptc's
    bf16 cast, which the backward gets too) is read from a copy with rows
    added. In the CUDA plan of the traced forward every operand's unit-stride
    extent and leading dim and the result's width are aligned; on the CPU
    (PTC_PAD_MM=1) the loss, the logits (eager's shape and strides) and every
    gradient equal eager's."""
    model, ids = make()
    want = hf_train_step(model, ids, False, amp)
    ptc.config.trace_dir = str(tmp_path / "trace")
    ptc.config.logs = "+runtime"
    try:
        got = hf_train_step(model, ids, True, amp)
    finally:
        ptc.config.trace_dir = ptc.config.logs = None
    calls = [ln for ln in capfd.readouterr().err.splitlines() if "extern mm:" in ln]
    tol = dict(rtol=2e-2, atol=2e-2) if amp else dict(rtol=1e-4, atol=1e-4)
    # BERT's CrossEntropyLoss under CPU autocast: eager's loss is float32,
    # ptc's bfloat16 (its autocast policy, with PTC_PAD_MM=0 too)
    same_dtype = make is gpt2_odd_vocab or not amp
    torch.testing.assert_close(got[0], want[0], **tol, check_dtype=same_dtype)
    assert got[2].shape == want[2].shape and got[2].stride() == want[2].stride()
    torch.testing.assert_close(got[2], want[2], **tol)
    for name in want[1]:
        torch.testing.assert_close(got[1][name], want[1][name], **tol, msg=name)
    align, padded = (8, 1008) if amp else (4, 1004)
    dt = "bf16" if amp else "f32"
    assert any("%s[256,%d] strides (1,256)" % (dt, padded) in ln for ln in calls), calls
    plan, lm_head = lm_head_plans(tmp_path, tmp_path / "trace", padded=padded, graph="forward")
    (ops, out), = lm_head
    assert [sz for _, sz, _ in ops] == [[2048, 256], [256, padded]], ops
    for extent, ld in unit_extents(ops):
        assert extent % align == 0 and ld % align == 0, ops
    assert result_shape(plan, out) == ([2048, padded], padded)
    assert "_pad_zero_rows:" in plan  # W's copy with rows added
