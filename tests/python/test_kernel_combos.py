"""Horizontal combinations (compiler/lower/combo.c): consecutive kernels with
no data between them run in one OpenMP parallel region on the CPU, as torch's
multi-tensor kernels cover many tensors with one launch. kernels.txt shows
each combination as a "combo" line; results are the members' own, bit for
bit, whichever thread computes a chunk."""
import json
import os
import re

import torch

import ptc
import ptcio
from ptcio import traced


def combos(kernels):
    """[(number of kernels, [kernel ids])] of kernels.txt's combo lines."""
    found = re.findall(r"^combo \d+: (\d+) kernels, one parallel region:([\d ]+)$", kernels, re.M)
    return [(int(n), [int(k) for k in ids.split()]) for n, ids in found]


def find_metric(m, name):
    if isinstance(m, dict):
        if name in m:
            return m[name]
        m = list(m.values())
    if isinstance(m, list):
        for v in m:
            f = find_metric(v, name)
            if f is not None:
                return f
    return None


def test_independent_updates_of_different_sizes_run_as_one_combination(tmp_path):
    """Three in-place updates of tensors of three sizes (an optimizer's
    shape): three kernels, one combination, eager's values bit for bit. The
    sizes add up to more work than one thread takes, so the chunks of all
    three are shared out over the team."""
    def update(a, b, c, ga, gb, gc):
        a.add_(ga * -0.1)
        b.mul_(0.9).add_(gb)
        c.copy_(c * 0.5 + gc.abs())
        return None

    torch.manual_seed(0)
    tensors = [torch.randn(n) for n in (300_001, 4_097, 77)]
    grads = [torch.randn_like(t) for t in tensors]
    mine = [t.clone() for t in tensors]
    update(*tensors, *grads)
    _, kernels, metrics = traced(update, *mine, *grads, tmp_path=tmp_path)
    for x, y in zip(mine, tensors):
        assert torch.equal(x, y)
    nkernels = len(re.findall(r"^kernel \d+", kernels, re.M))
    assert nkernels == 3, kernels
    assert combos(kernels) == [(3, [0, 1, 2])], kernels
    assert find_metric(metrics, "kernel_combos") == 1, metrics
    # the same program runs again (the cached entry) with new values
    again = [torch.randn_like(t) for t in tensors]
    ref = [t.clone() for t in again]
    update(*ref, *grads)
    ptc.compile(update)(*again, *grads)
    for x, y in zip(again, ref):
        assert torch.equal(x, y)


def test_a_kernel_that_reads_what_another_writes_is_not_combined(tmp_path):
    """y = a.sin() feeds z's kernel through a reduction: the kernels that
    depend on each other run one after the other, never in one region."""
    def f(a, b):
        y = a.sin() * 2
        s = y.sum(1, keepdim=True)
        return y, b * s.mean() + 1

    a, b = torch.randn(64, 300), torch.randn(1000)
    (y, z), kernels, _ = traced(f, a, b, tmp_path=tmp_path)
    ye, ze = f(a, b)
    torch.testing.assert_close(y, ye)
    torch.testing.assert_close(z, ze)
    writes = {}
    for m in re.finditer(r"^kernel (\d+)[^\n]*\n((?:  [^\n]*\n)*)", kernels, re.M):
        writes[int(m.group(1))] = m.group(2)
    for _, ids in combos(kernels):
        for i in ids:
            for j in ids:
                if i < j:
                    # no buffer stored by kernel i is loaded by kernel j
                    stored = set(re.findall(r"-> (buf\d+)\[", writes[i]))
                    loaded = set(re.findall(r"load (buf\d+)\[", writes[j]))
                    assert not stored & loaded, kernels


def test_cuda_plans_have_no_combinations(tmp_path):
    """The CUDA backend launches each kernel (one launch per combination is
    not built yet): ptc-run plans the same update for CUDA without combos."""
    ptir = tmp_path / "update.ptir"
    ptir.write_text(
        "# ptc ir v1\n"
        "graph forward(%a: f32[1000] cuda, %b: f32[37] cuda) {\n"
        "  %0 = prims.sin(%a) : f32[1000]\n"
        "  %1 = prims.cos(%b) : f32[37]\n"
        "  return (%0, %1)\n"
        "}\n")
    cuda = ptcio.ptc_run("--emit=kernels", "--backend", "cuda", "--cuda-arch", "sm_90", ptir)
    assert cuda.returncode == 0, cuda.stderr
    assert len(re.findall(r"^kernel \d+", cuda.stdout, re.M)) == 2, cuda.stdout
    assert combos(cuda.stdout) == [], cuda.stdout
    cpu = ptcio.ptc_run("--emit=kernels", "--backend", "cpu", ptir.with_suffix(".ptir"))
    assert cpu.returncode == 0, cpu.stderr
    assert combos(cpu.stdout) == [(2, [0, 1])], cpu.stdout


# ---- members over arena temporaries ------------------------------------------------------


def arena_spans(kernels):
    """{buffer: (first byte, end)} of kernels.txt's static memory plan."""
    return {b: (int(at), int(at) + int(n)) for b, n, at in
            re.findall(r"^  (buf\d+): .* (\d+) bytes at (\d+), live", kernels, re.M)}


def kernel_args(kernels):
    """{kernel id: [buffers it takes]} of kernels.txt."""
    return {int(k): args.split() for k, args in
            re.findall(r"^kernel (\d+) .*\n  args ([^\n]*)", kernels, re.M)}


def assert_members_apart(kernels):
    """No two arena buffers that the members of one combination touch share
    a byte: the members run at once."""
    spans, args = arena_spans(kernels), kernel_args(kernels)
    for _, ids in combos(kernels):
        touched = sorted({b for k in ids for b in args[k] if b in spans})
        for i, x in enumerate(touched):
            for y in touched[i + 1:]:
                assert spans[x][1] <= spans[y][0] or spans[y][1] <= spans[x][0], (x, y, kernels)


# Two column sums: kernel 1 reads the first for the last time while kernel 2,
# independent of it, writes the second; step by step the memory plan gives
# them the same bytes, and combined kernel 2's threads would overwrite the
# sum kernel 1's threads still read.
COLUMN_SUMS = os.path.join(os.environ.get("PTC_SOURCE_DIR", os.path.join(
    os.path.dirname(__file__), "..", "..")), "tests", "lower", "combined_column_sums.ptir")


def test_kernels_over_temporaries_combine_with_their_own_bytes(monkeypatch):
    """The reader of the first sum and the writer of the second run as one
    combination, each sum in bytes of its own (the plan counts the
    combination's steps as one), and the results match the reference
    interpreter with the chunks shared out over four threads, run after run.
    PTC_COMBO_TEMPORARIES=0 keeps the two apart, as before."""
    ptir = COLUMN_SUMS
    plan = ptcio.ptc_run("--emit=kernels", "--backend", "cpu", ptir)
    assert plan.returncode == 0, plan.stderr
    assert combos(plan.stdout) == [(2, [1, 2])], plan.stdout
    assert len(arena_spans(plan.stdout)) == 2, plan.stdout
    assert_members_apart(plan.stdout)
    monkeypatch.setenv("PTC_COMBO_TEMPORARIES", "0")  # as before: each kernel alone
    alone = ptcio.ptc_run("--emit=kernels", "--backend", "cpu", ptir)
    assert alone.returncode == 0 and combos(alone.stdout) == [], alone.stdout
    monkeypatch.delenv("PTC_COMBO_TEMPORARIES")
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    for seed in range(6):
        run = ptcio.ptc_run("--check", "--backend", "cpu", "--seed", seed, ptir)
        assert run.returncode == 0 and "2 outputs match" in run.stdout, run.stdout + run.stderr


def test_a_backwards_independent_kernels_over_temporaries_combine(tmp_path):
    """Two BatchNorms' backwards, every buffer between their kernels an arena
    temporary (what a training backward is made of): their independent
    kernels run as combinations (none before), the gradients are eager's."""
    torch.manual_seed(0)

    class Branches(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.BatchNorm1d(256), torch.nn.BatchNorm1d(128)

        def forward(self, x, z):
            return torch.tanh(self.a(x)), torch.sigmoid(self.b(z))

    mine, ref = Branches(), Branches()
    ref.load_state_dict(mine.state_dict())
    x, z = torch.randn(64, 256), torch.randn(64, 128)
    xs = [x.clone().requires_grad_(), z.clone().requires_grad_()]
    xr = [x.clone().requires_grad_(), z.clone().requires_grad_()]
    old = ptc.config.trace_dir
    ptc.config.trace_dir = str(tmp_path)
    try:
        u, v = ptc.compile(mine)(*xs)
    finally:
        ptc.config.trace_dir = old
    (u.square().sum() + v.sum()).backward()
    ue, ve = ref(*xr)
    (ue.square().sum() + ve.sum()).backward()
    for got, want in zip([*xs, *mine.parameters()], [*xr, *ref.parameters()]):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-5)
    [folder] = [d for d in tmp_path.iterdir() if d.is_dir()]
    metrics = json.loads((folder / "metrics.json").read_text())
    assert find_metric(metrics, "backward_kernel_combos") >= 2, metrics
    plan = ptcio.ptc_run("--emit=kernels", "--backend", "cpu", folder / "backward.ptir")
    assert plan.returncode == 0, plan.stderr
    spans, args = arena_spans(plan.stdout), kernel_args(plan.stdout)
    assert any(b in spans for _, ids in combos(plan.stdout) for k in ids for b in args[k]), \
        plan.stdout
    assert_members_apart(plan.stdout)
