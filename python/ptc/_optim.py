"""The step of a torch.optim optimizer run as a ptc-compiled update.

``step(opt)`` does what ``opt.step()`` does for torch.optim.SGD, Adam and
AdamW (no closure, no hooks, not capturable or differentiable, real dense
parameters): torch's own ``_init_group`` makes the missing state exactly as
torch's first step would (``step`` as a float32 tensor, on the parameter's
device only when fused), and then one compiled program per parameter group
and device updates every parameter and state tensor that has a gradient.

The update is a Python function traced by ``ptc.compile`` (the ``_*_update``
functions below): its inputs are the parameters, their gradients and their
state tensors, plus one float64 tensor of the hyper-parameters (lr, betas,
eps, weight decay, momentum, and the bias corrections of each parameter's
step, computed in Python doubles as torch computes them). The numbers are
data, not constants of the program, so an LR scheduler changing lr each step
runs the same program. The in-place updates of parameters and state are the
program's writes to its inputs (the caller's tensors keep their identity).

The functions follow the order of torch's single-tensor implementation op by
op, each torch op computed in its "opmath" dtype (float32 for bfloat16 and
float16 parameters) and rounded to the parameter's dtype where torch's op
rounds. Where torch's vectorised CPU kernels use a fused multiply-add (lerp,
add with alpha) ptc rounds the product first: those results may differ in
the last bit (tests/python/test_optimizer_step.py measures it).

``unsupported(opt, closure)`` says why a step runs torch's own instead; the
trace puts it in the break's message (ptexplain shows it).
"""
import torch

_KINDS = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adam"}
_updates = {}  # (update, flags, layout of the parameters) -> its compiled function


def _hooks_of(opt):
    from torch.optim import optimizer as o
    hooks = [("step pre-hooks", opt._optimizer_step_pre_hooks),
             ("step post-hooks", opt._optimizer_step_post_hooks),
             ("global step pre-hooks", getattr(o, "_global_optimizer_pre_hooks", {})),
             ("global step post-hooks", getattr(o, "_global_optimizer_post_hooks", {}))]
    return [name for name, h in hooks if h]


def _group_unsupported(kind, group):
    for flag in ("capturable", "differentiable"):
        if group.get(flag):
            return "%s=True" % flag
    names = ["lr", "weight_decay"] + (["momentum", "dampening"] if kind == "sgd" else ["eps"])
    values = [group[n] for n in names] + (list(group["betas"]) if kind == "adam" else [])
    if any(torch.is_tensor(v) for v in values):
        return "a tensor hyper-parameter (lr, betas, ...)"
    for p in group["params"]:
        if p.grad is None:
            continue
        if torch.is_complex(p):
            return "complex parameters"
        if p.grad.is_sparse or p.layout != torch.strided:
            return "sparse gradients or parameters"
        if p.grad.dtype != p.dtype or p.grad.device != p.device or p.grad.shape != p.shape:
            return "a gradient of another dtype, device or shape than its parameter"
        if p.dtype not in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
            return "%s parameters" % p.dtype
        if p.device.type != "cpu":
            # Measured on an H100 (bench/optimizer_step.py --device cuda): the
            # update, a kernel per parameter, was slower than torch's foreach and
            # fused kernels (resnet18 AdamW 3.19 ms against 1.57 / 0.70). Its
            # values are right there (test_gpu_optimizer_step.py passed on an
            # H100; SGD's 5.4e-2 was a refused launch after two in-place kernels,
            # then an eager rerun, fixed): CUDA waits for one-launch combinations.
            return "parameters on %s (ptc's compiled update runs on the CPU only)" % p.device.type
    return None


def unsupported(opt, closure=None):
    """Why ptc runs opt.step(closure) as torch's own step, or None."""
    kind = _KINDS.get(type(opt))
    if kind is None:
        return "%s is not one of torch.optim's SGD, Adam, AdamW" % type(opt).__qualname__
    if closure is not None:
        return "a closure"
    hooks = _hooks_of(opt)
    if hooks:
        return "the optimizer has %s" % ", ".join(hooks)
    mine = opt.__dict__.get("step")
    if mine is not None and not getattr(mine, "_wrapped_by_lr_sched", False):
        return "step is replaced on the instance"
    if getattr(opt, "grad_scale", None) is not None or getattr(opt, "found_inf", None) is not None:
        return "a GradScaler's grad_scale / found_inf"
    for group in opt.param_groups:
        why = _group_unsupported(kind, group)
        if why:
            return why
    return None


def compiled_step_of(method):
    """What ptc.compile(opt.step) returns for the bound step of an SGD, Adam
    or AdamW: a function that runs step(opt, closure); None for other methods
    and optimizers (ptc.compile traces those as any function)."""
    opt = getattr(method, "__self__", None)
    if type(opt) not in _KINDS or getattr(method.__func__, "__name__", "") != "step":
        return None

    def compiled_step(closure=None):
        return step(opt, closure, warn=True)
    compiled_step.__name__ = compiled_step.__qualname__ = "step"
    compiled_step.__doc__ = method.__doc__
    return compiled_step


def step(opt, closure=None, warn=False):
    """opt.step(closure), by ptc's compiled update where supported, else torch's
    (warn: with a warning that says why, once per reason)."""
    why = unsupported(opt, closure)
    if why is not None:
        if warn:
            from . import _notices
            _notices.not_acted_on("the step of %s runs torch's own update, not ptc's compiled "
                                  "one: ptc's does not support %s." % (type(opt).__name__, why))
        return opt.step(closure)
    if getattr(opt.__dict__.get("step"), "_wrapped_by_lr_sched", False):
        opt._opt_called = True  # what the LR scheduler's wrapper of step records
    with torch.no_grad(), torch.autograd.profiler.record_function(
            "Optimizer.step#%s.step" % type(opt).__name__):
        update_groups(opt)
        opt._optimizer_step_code()
    return None


def update_groups(opt):
    """ptc's compiled update of every parameter group of opt (an SGD, Adam
    or AdamW), under no_grad, whatever unsupported() says: step() calls it
    where unsupported() found nothing; the GPU tests call it to check the
    update on CUDA, which step() leaves to torch."""
    kind = _KINDS[type(opt)]
    with torch.no_grad():
        for group in opt.param_groups:
            (_sgd_group if kind == "sgd" else _adam_group)(opt, group)


def _compiled(update, flags, tensors):
    """The compiled update for these flags and these tensors' layout: one
    ptc.compile per configuration, so that optimizers of many shapes and
    options never meet the recompile limit of one function."""
    key = (update, flags, tuple((t.shape, t.dtype, t.device, t.stride()) for t in tensors))
    fn = _updates.get(key)
    if fn is None:
        from . import compile as ptc_compile
        fn = _updates[key] = ptc_compile(update)
    return fn


def _by_device(params):
    """Indices of params per device, in order (one program runs on one device)."""
    out = {}
    for i, p in enumerate(params):
        out.setdefault(p.device, []).append(i)
    return out.values()


def _pick(seq, idx):
    return [seq[i] for i in idx]


def _pick_params(params, idx):
    """The parameters as tensors that do not require grad (torch's step writes
    them under no_grad; detach() shares their storage and version counter)."""
    return [params[i].detach() for i in idx]


def _scalars(rows, device):
    return torch.tensor(rows, dtype=torch.float64, device=device)


# ---- Adam, AdamW ----------------------------------------------------------------------------

def _adam_group(opt, group):
    params, grads, exp_avgs, exp_avg_sqs, max_sqs, steps = [], [], [], [], [], []
    opt._init_group(group, params, grads, exp_avgs, exp_avg_sqs, max_sqs, steps)
    if not params:
        return
    torch._foreach_add_(steps, 1)  # torch: step_t += 1 per parameter
    beta1, beta2 = group["betas"]
    lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
    decay = "none" if wd == 0 else "decoupled" if group["decoupled_weight_decay"] else "l2"
    amsgrad = bool(group["amsgrad"])
    for idx in _by_device(params):
        rows = []
        # each step's value, read at once (with fused=True they are on the device)
        step_values = torch.stack([steps[i] for i in idx]).tolist()
        for i, t in zip(idx, step_values):
            # torch's single-tensor Adam, in Python doubles
            bias_correction1 = 1 - beta1 ** t
            bias_correction2 = 1 - beta2 ** t
            step_size = lr / bias_correction1
            rows.append([1 - lr * wd if decay == "decoupled" else wd, 1 - beta1, beta2, 1 - beta2,
                         bias_correction2 ** 0.5, eps, -step_size])
        flags = (amsgrad, bool(group["maximize"]), decay, abs(1 - beta1) < 0.5)
        update = _compiled(_adam_update, flags, _pick(params, idx))
        update(_pick_params(params, idx), _pick(grads, idx), _pick(exp_avgs, idx),
               _pick(exp_avg_sqs, idx), _pick(max_sqs, idx) if amsgrad else [],
               _scalars(rows, params[idx[0]].device), *flags)


def _alpha(scalar, dt):
    """The alpha of torch's add(x, y, alpha=...): rounded to the tensors'
    dtype first (bfloat16, float16), then computed in opmath."""
    opmath = torch.float64 if dt == torch.float64 else torch.float32
    return scalar.to(dt).to(opmath)


def _lerp(start, end, weight, small):
    """torch's lerp with a scalar weight, in opmath: start + w (end - start)
    for |w| < 0.5, else end - (end - start)(1 - w)."""
    if small:
        return start + weight * (end - start)
    return end - (end - start) * (1 - weight)


def _adam_update(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, scalars, amsgrad,
                 maximize, decay, small_lerp):
    # scalars[i]: decay (1 - lr*wd, or wd), 1 - beta1, beta2, 1 - beta2,
    # sqrt(bias_correction2), eps, -step_size
    for i in range(len(params)):
        p, m, v, s = params[i], exp_avgs[i], exp_avg_sqs[i], scalars[i]
        dt = p.dtype
        g = -grads[i] if maximize else grads[i]
        pf = p.float() if dt != torch.float64 else p
        if decay == "decoupled":
            pf = (pf * s[0]).to(dt).to(pf.dtype)               # param.mul_(1 - lr * wd)
        elif decay == "l2":
            g = (g.to(pf.dtype) + _alpha(s[0], dt) * pf).to(dt)  # grad.add(param, alpha=wd)
        gf = g.to(pf.dtype)
        mf = _lerp(m.to(pf.dtype), gf, s[1], small_lerp).to(dt)  # exp_avg.lerp_(grad, 1 - beta1)
        vf = (v.to(pf.dtype) * s[2]).to(dt)                    # exp_avg_sq.mul_(beta2)
        vf = (vf.to(pf.dtype) + s[3] * gf * gf).to(dt)         # .addcmul_(grad, grad, value=1 - beta2)
        m.copy_(mf)
        v.copy_(vf)
        if amsgrad:
            vf = torch.maximum(max_exp_avg_sqs[i], vf)
            max_exp_avg_sqs[i].copy_(vf)
        denom = vf.to(pf.dtype).sqrt().to(dt)                  # .sqrt()
        denom = (denom.to(pf.dtype) / s[4]).to(dt)             # / bias_correction2_sqrt
        denom = (denom.to(pf.dtype) + s[5]).to(dt)             # .add_(eps)
        # param.addcdiv_(exp_avg, denom, value=-step_size)
        p.copy_(pf + s[6] * mf.to(pf.dtype) / denom.to(pf.dtype))


# ---- SGD -----------------------------------------------------------------------------------

def _sgd_group(opt, group):
    params, grads, bufs = [], [], []
    opt._init_group(group, params, grads, bufs)
    if not params:
        return
    momentum = group["momentum"]
    for idx in _by_device(params):
        fresh = []
        for i in idx:
            if momentum != 0 and bufs[i] is None:
                # torch's first step: buf = grad.detach().clone(), grad after weight decay
                bufs[i] = torch.empty_like(grads[i])
                opt.state[params[i]]["momentum_buffer"] = bufs[i]
                fresh.append(True)
            else:
                fresh.append(False)
        rows = [[group["weight_decay"], momentum, 1 - group["dampening"], -group["lr"]]] * len(idx)
        flags = (tuple(fresh), group["weight_decay"] != 0, momentum != 0,
                 bool(group["nesterov"]), bool(group["maximize"]))
        update = _compiled(_sgd_update, flags, _pick(params, idx))
        update(_pick_params(params, idx), _pick(grads, idx),
               _pick(bufs, idx) if momentum != 0 else [],
               _scalars(rows, params[idx[0]].device), *flags)


def _sgd_update(params, grads, bufs, scalars, fresh, decay, momentum, nesterov, maximize):
    # scalars[i]: weight_decay, momentum, 1 - dampening, -lr
    for i in range(len(params)):
        p, s = params[i], scalars[i]
        dt = p.dtype
        g = -grads[i] if maximize else grads[i]
        pf = p.float() if dt != torch.float64 else p
        if decay:
            g = (g.to(pf.dtype) + _alpha(s[0], dt) * pf).to(dt)  # grad.add(param, alpha=wd)
        if momentum:
            buf = bufs[i]
            if fresh[i]:
                bf = g                                          # buf = grad.clone()
            else:
                bf = (buf.to(pf.dtype) * s[1]).to(dt)           # buf.mul_(momentum)
                bf = (bf.to(pf.dtype) + _alpha(s[2], dt) * g.to(pf.dtype)).to(dt)  # .add_(grad, alpha=1 - dampening)
            buf.copy_(bf)
            if nesterov:
                g = (g.to(pf.dtype) + _alpha(s[1], dt) * bf.to(pf.dtype)).to(dt)  # grad.add(buf, alpha=momentum)
            else:
                g = bf
        p.copy_(pf + _alpha(s[3], dt) * g.to(pf.dtype))        # param.add_(grad, alpha=-lr)
