"""The optimizer's step under ptc (issue 15 item 5): opt.step() of SGD, Adam
and AdamW met in a compiled function runs ptc's compiled update
(python/ptc/_optim.py, compiler/capture/trace/optim_step.c) and leaves
parameters, gradients and every state tensor as torch's step does.

Exactness: bfloat16 Adam / AdamW are bitwise torch's (single-tensor) step;
elsewhere torch's vectorised CPU kernels fuse a multiply and an add (lerp,
add with alpha: one rounding) where ptc rounds the product first, so values
may differ in the last bits. The tests bound the difference after 20 steps in
"scale ulps": units of the dtype's epsilon times the tensor's largest
magnitude (measured on this machine: at most 2.5 for torch's default
single-tensor step; 8.9 for foreach / fused, whose op order differs)."""
import copy
import json
import os
import warnings

import pytest
import torch

import ptc
from ptc import _optim

CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.2, maximize=True, weight_decay=0.05)),
    ("Adam", dict(lr=1e-2)),
    ("Adam", dict(lr=1e-2, weight_decay=0.1, amsgrad=True)),
    ("Adam", dict(lr=1e-2, betas=(0.3, 0.99), maximize=True, foreach=True)),
    ("AdamW", dict(lr=1e-2)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.3, amsgrad=True, maximize=True)),
    ("AdamW", dict(lr=1e-2, fused=True)),
]
# The most scale ulps apart a value may end after 20 steps: against torch's
# default (single-tensor) step, and against its foreach / fused ones.
ULPS, ULPS_OTHER_ORDER = 4, 16
# A whole training step: the compiled forward and backward's gradients
# differ from eager's in the last bits too.
ULPS_WHOLE_STEP = 64


def ulps_apart(a, b):
    """max |a - b| in units of b's dtype's epsilon times max |b|."""
    eps = torch.finfo(b.dtype).eps
    scale = b.double().abs().max().clamp_min(1e-30)
    return ((a.double() - b.double()).abs().max() / (eps * scale)).item()


def model(dtype):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(),
                               torch.nn.Linear(24, 3)).to(dtype)


def set_grads(m, step):
    gen = torch.Generator().manual_seed(1000 + step)
    for k, p in enumerate(m.parameters()):
        # the last bias has no gradient on odd steps: torch skips it, so must ptc
        skip = k == 3 and step % 2 == 1
        p.grad = None if skip else torch.randn(p.shape, generator=gen).to(p.dtype)


def run_steps(name, kw, dtype, stepper, steps=20):
    m = model(dtype)
    opt = getattr(torch.optim, name)(m.parameters(), **kw)
    for s in range(steps):
        set_grads(m, s)
        stepper(opt)
    return m, opt


def assert_same_state(eager, mine, bound, exact=False):
    (me, oe), (mm, om) = eager, mine
    for (pname, p), q in zip(me.named_parameters(), mm.parameters()):
        assert q.dtype == p.dtype and (q.grad is None) == (p.grad is None), pname
        assert ulps_apart(q, p) <= bound, (pname, ulps_apart(q, p))
        if exact:
            assert torch.equal(q, p), pname
        if p.grad is not None:
            assert torch.equal(q.grad, p.grad), pname
    assert len(oe.state) == len(om.state)
    for p, q in zip(me.parameters(), mm.parameters()):
        se, sm = oe.state[p], om.state[q]
        assert sorted(se) == sorted(sm)
        for k in se:
            assert (sm[k].dtype, sm[k].device, sm[k].shape) == (se[k].dtype, se[k].device,
                                                                se[k].shape), k
            assert ulps_apart(sm[k], se[k]) <= bound, (k, ulps_apart(sm[k], se[k]))
            if exact:
                assert torch.equal(sm[k], se[k]), k


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("name,kw", CASES, ids=[n + str(i) for i, (n, _) in enumerate(CASES)])
def test_the_compiled_update_matches_torchs_step(name, kw, dtype):
    if kw.get("fused") and dtype == torch.bfloat16:
        pytest.skip("torch's fused CPU AdamW computes bf16 in float32 throughout")
    eager = run_steps(name, kw, dtype, lambda opt: opt.step())
    mine = run_steps(name, kw, dtype, lambda opt: _optim.step(opt))
    other_order = kw.get("fused") or kw.get("foreach")
    exact = dtype == torch.bfloat16 and name != "SGD" and not other_order
    assert_same_state(eager, mine, ULPS_OTHER_ORDER if other_order else ULPS, exact)
    # the state torch's first step makes: step a float32 tensor on the CPU
    p = next(mine[0].parameters())
    if name != "SGD":
        step = mine[1].state[p]["step"]
        assert step.dtype == torch.float32 and step.device.type == "cpu" and step.item() == 20


def test_the_last_bias_never_given_a_gradient_gets_no_state():
    m = model(torch.float32)
    opt = torch.optim.Adam(m.parameters())
    for p in list(m.parameters())[:3]:
        p.grad = torch.ones_like(p)
    _optim.step(opt)
    last = list(m.parameters())[3]
    assert last not in opt.state and len(opt.state) == 3


def whole_step(name, kw, scheduler=False):
    m = model(torch.float32)
    opt = getattr(torch.optim, name)(m.parameters(), **kw)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, 0.9) if scheduler else None

    def step(x, y):
        loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    return m, opt, sched, step


@pytest.mark.parametrize("scheduler", [False, True], ids=["", "scheduler"])
@pytest.mark.parametrize("name,kw", [("SGD", dict(lr=0.05, momentum=0.9)),
                                     ("Adam", dict(lr=1e-2)),
                                     ("AdamW", dict(lr=1e-2, amsgrad=True))])
def test_a_whole_training_step_compiles_the_update_once(name, kw, scheduler):
    # with a scheduler, opt.step is its wrapper on the instance, and lr
    # changes at every step
    _optim._updates.clear()
    me, oe, se, eager_step = whole_step(name, kw, scheduler)
    mm, om, sm, step = whole_step(name, kw, scheduler)
    compiled = ptc.compile(step)
    gen = torch.Generator().manual_seed(7)
    for s in range(20):
        x, y = torch.randn(8, 12, generator=gen), torch.randint(0, 3, (8,), generator=gen)
        le, lc = eager_step(x, y), compiled(x, y)
        assert abs(le.item() - lc.item()) <= 1e-4 * max(1.0, abs(le.item())), s
        if scheduler:
            se.step()
            sm.step()
    assert om.param_groups[0]["lr"] == oe.param_groups[0]["lr"]
    assert (om.param_groups[0]["lr"] != kw["lr"]) == scheduler
    assert_same_state((me, oe), (mm, om), ULPS_WHOLE_STEP)
    # the update compiled once (SGD: once more for the first step, which
    # makes the momentum buffers)
    compiles = [e for fn in _optim._updates.values() for e in fn._events() if e["kind"] == "compile"]
    assert len(compiles) == (2 if name == "SGD" else 1), compiles
    assert all(e["end"] == "return" and e["break"] is None for e in compiles)
    ex = ptc.explain(whole_step(name, kw)[3])(x, y)
    details = [b.get("detail", "") for b in ex.breaks]
    assert any("ptc's compiled update" in d for d in details), details


def unsupported_cases():
    def hooked(params):
        opt = torch.optim.Adam(params)
        opt.register_step_pre_hook(lambda *a: None)
        return opt
    return [
        ("RMSprop is not one of", lambda ps: torch.optim.RMSprop(ps, lr=1e-2), None),
        ("a closure", lambda ps: torch.optim.Adam(ps), lambda: None),
        ("step pre-hooks", hooked, None),
        ("a tensor hyper-parameter", lambda ps: torch.optim.SGD(ps, lr=torch.tensor(0.1)), None),
    ]


@pytest.mark.parametrize("why,make,closure", unsupported_cases(),
                         ids=[c[0] for c in unsupported_cases()])
def test_what_ptc_does_not_support_runs_torchs_step_and_says_why(why, make, closure):
    results = []
    for compiled in (False, True):
        m = model(torch.float32)
        opt = make(m.parameters())

        def step(x):
            m(x).square().sum().backward()
            opt.step(closure)
            opt.zero_grad()
        f = ptc.compile(step) if compiled else step
        for s in range(3):
            f(torch.full((2, 12), 0.1 * (s + 1)))
        results.append(m)
    for p, q in zip(results[0].parameters(), results[1].parameters()):
        assert torch.equal(p, q)  # torch's own step, in both
    ex = ptc.explain(step)(torch.ones(2, 12))
    details = [b.get("detail", "") for b in ex.breaks]
    assert any("runs torch's own update" in d and why in d for d in details), details


def test_compiling_opt_step_itself_runs_the_compiled_update():
    eager = run_steps("Adam", dict(lr=1e-2, amsgrad=True), torch.float32, lambda opt: opt.step())
    steppers = {}

    def compiled_step(opt):
        if opt not in steppers:
            steppers[opt] = ptc.compile(opt.step)
        steppers[opt]()
    _optim._updates.clear()
    mine = run_steps("Adam", dict(lr=1e-2, amsgrad=True), torch.float32, compiled_step)
    assert_same_state(eager, mine, ULPS)
    assert _optim._updates  # the compiled update ran, not torch's step
    opt = torch.optim.Adam(model(torch.float32).parameters())
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ptc.compile(opt.step)(lambda: None)
    assert any("does not support a closure" in str(x.message) for x in w), [str(x.message) for x in w]


def test_the_same_update_plans_for_cuda(tmp_path):
    """The update's captured graph with its tensors on CUDA: ptc-run plans it
    for the CUDA backend (no GPU needed): one kernel per leading size
    (Linear(12, 24) and Linear(24, 3): weight and bias share one), the two
    run as one launch (a horizontal combination); on the CPU at most one per
    parameter (a bias of 3 joins its weight's kernel there only when the
    scheduler finds enough parallelism)."""
    import re
    import ptcio
    m = model(torch.float32)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, amsgrad=True)
    set_grads(m, 0)
    _optim._updates.clear()
    old = ptc.config.trace_dir
    ptc.config.trace_dir = str(tmp_path / "trace")
    try:
        _optim.step(opt)
    finally:
        ptc.config.trace_dir = old
    [folder] = [d for d in os.listdir(tmp_path / "trace") if (tmp_path / "trace" / d).is_dir()]
    graph = (tmp_path / "trace" / folder / "captured.ptir").read_text()
    assert graph.count(" cpu") == 4 * 5 + 1  # p, grad, exp_avg, exp_avg_sq, max: 4 params; scalars
    cuda = tmp_path / "adamw_cuda.ptir"
    cuda.write_text(re.sub(r" cpu([,)])", r" cuda\1", graph))
    r = ptcio.ptc_run("--emit=kernels", "--backend", "cuda", "--cuda-arch", "sm_90", cuda)
    assert r.returncode == 0, r.stderr
    assert len(re.findall(r"^kernel \d+", r.stdout, re.M)) == 2, r.stdout
    assert re.search(r"^combo 0: 2 kernels, one launch: 0 1$", r.stdout, re.M), r.stdout
    cpu = (tmp_path / "trace" / folder / "kernels.txt").read_text()
    assert 2 <= len(re.findall(r"^kernel \d+", cpu, re.M)) <= 4, cpu
    # each kernel writes parameters and state in place: no output to copy back
    metrics = json.loads((tmp_path / "trace" / folder / "metrics.json").read_text())
    assert in_place(metrics) == 4 * 4, metrics


def in_place(metrics):
    """The metric outputs_in_place of a compile's metrics.json, wherever it sits."""
    if isinstance(metrics, dict):
        if "outputs_in_place" in metrics:
            return metrics["outputs_in_place"]
        found = [in_place(v) for v in metrics.values()]
    elif isinstance(metrics, list):
        found = [in_place(v) for v in metrics]
    else:
        return None
    found = [f for f in found if f is not None]
    return found[0] if found else None


@pytest.mark.parametrize("flip", [False, True], ids=["same_element", "flipped"])
def test_an_input_written_in_place_is_written_by_the_kernel_itself(tmp_path, flip):
    """x.mul_(2).add_(y) on an argument: the kernel stores into x's memory
    (no new output, no copy after the run). Reading x at other elements than
    it writes (x.add_(x.flip(0))) keeps the output and the copy: the kernel
    would otherwise read elements it already wrote."""
    def f(x, y):
        if flip:
            x.add_(x.flip(0))
        else:
            x.mul_(2).add_(y)
        return y.sum()
    old = ptc.config.trace_dir
    ptc.config.trace_dir = str(tmp_path)
    try:
        x, y = torch.randn(64, 32), torch.randn(64, 32)
        xe, ptr = x.clone(), x.data_ptr()
        f(xe, y)
        ptc.compile(f)(x, y)
    finally:
        ptc.config.trace_dir = old
    assert torch.equal(x, xe) and x.data_ptr() == ptr
    [folder] = [d for d in os.listdir(tmp_path) if (tmp_path / d).is_dir()]
    metrics = json.loads((tmp_path / folder / "metrics.json").read_text())
    assert in_place(metrics) == (0 if flip else 1), metrics


def test_parameters_off_the_cpu_keep_torchs_step():
    # On CUDA the compiled update measured slower than torch's kernels and
    # SGD with momentum differed from eager (H100): torch's step runs there,
    # and the break says why. A meta-device parameter stands for one.
    from ptc import _optim
    p = torch.nn.Parameter(torch.empty(4, device="meta"))
    p.grad = torch.empty(4, device="meta")
    why = _optim.unsupported(torch.optim.SGD([p], lr=0.1, momentum=0.9))
    assert why and "CPU only" in why, why
    q = torch.nn.Parameter(torch.zeros(4))
    q.grad = torch.ones(4)
    assert _optim.unsupported(torch.optim.SGD([q], lr=0.1, momentum=0.9)) is None


PARTIAL_RUN = """
import torch, ptc
def f(x, y, w):
    x.mul_(2)                                # a kernel writes x itself (in place)
    return ((y @ w).exp() * 2).sum(1).sum()  # a later kernel fails (PTC_INJECT)
x, y, w = torch.ones(64, 32), torch.randn(16, 300), torch.randn(300, 8)
try:
    ptc.compile(f)(x, y, w)
    print("ran", x[0, 0].item())
except ptc.PartialRunError as e:
    print("raised", x[0, 0].item(), "in place" in str(e))
"""


def test_a_run_that_fails_after_writing_inputs_in_place_is_not_run_again():
    """x.mul_(2) is written into x by the program's first kernel; the next
    kernel fails. Falling back to eager then doubled x again (x == 4): on an
    H100 the first SGD step of GPT-2 failed so (a launch of more than 63
    parameters) after two kernels had updated wte and wpe, which the eager
    fallback updated once more. The failure is ptc.PartialRunError now, and
    x was written once. (The matmul between the two kernels keeps them
    apart: side by side they would run as one combination, which fails
    before either member runs.)"""
    import subprocess
    import sys
    env = dict(os.environ, PTC_INJECT="runtime:prims.exp:error")
    r = subprocess.run([sys.executable, "-c", PARTIAL_RUN], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["raised", "2.0", "True"], (r.stdout, r.stderr)


def test_an_index_error_after_an_in_place_write_leaves_eagers_state():
    """x.mul_(2), then y[idx] with an index out of bounds: eager doubles x
    once and raises IndexError. ptc's first kernel writes x in place and the
    next one's check fails; running the segment again eagerly (to raise
    eager's error) doubled x a second time. Now eager's IndexError comes
    from the run itself and x is doubled once."""
    def f(x, y, idx):
        x.mul_(2)
        return (y[idx] * 3).sum()
    x, y, idx = torch.ones(64, 32), torch.randn(100), torch.tensor([1, 500])
    with pytest.raises(IndexError, match="index 500 is out of bounds"):
        ptc.compile(f)(x, y, idx)
    assert torch.equal(x, torch.full((64, 32), 2.0))
