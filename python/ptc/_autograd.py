"""One compiled call, one autograd node: the Function that runs a graph's
compiled forward and, when torch's backward reaches it, its compiled
backward (compiler/capture/backend/backend_train.c builds both).

The forward returns the outputs and the tensors the backward needs
(``program.forward_blocks``): the values it computes for the backward are
not a tensor each but placed in a few blocks of bytes, in the order the
backward lets them go, with a ``SavedLayout`` saying where each sits (a
GPT-2 step saved ~280 tensors, each a torch allocation, made, converted and
saved; ``saved_values`` rebuilds them for a reader). The blocks and the
saved inputs are kept with ``save_for_backward``, so torch's checks on saved
tensors (a later in-place write, ``retain_graph``) apply.
The backward takes them out of the node (``maybe_clear_saved_tensors``,
unless the graph is retained) and hands them to the compiled backward with
the output gradients, which lets each go after the last kernel that reads it
(``backward_consuming``), as eager's autograd frees a saved tensor once its
node's backward has run: otherwise every saved tensor of the forward would
live until the whole backward ended, beside the gradients. An output torch
gives no gradient (BERT's logits when the loss is computed inside the
model) is passed as None: the compiled backward then runs a variant
compiled with that gradient a known zero, folded away (no tensor of zeros
made, no kernel multiplying or adding it), compiled once per set of such
outputs (a CUDA graph recording, which reads fixed buffers, gets zeros).
Outputs that do not depend on an input requiring gradients are marked
non-differentiable, as eager leaves them. An output the forward wrote into
its input itself (BatchNorm's running statistics, ``program.written_into``)
is that input: it is not returned through the node, where torch would make
a view of it on every call (a view_as and a view per statistic), but put
back in its place by ``apply``. The backward is not itself
differentiable: ``create_graph=True`` through it raises an error saying so.

Under reduce-overhead on CUDA the program is a ``_cudagraphs.TrainGraphs``,
which replays recorded forwards and backwards: the node holds its forward
recording until its backward has run (``backward_pending``), and gradients
for leaves pass through ``grads_for``.

Gradients keep torch's layout contract (AccumulateGrad's, which DDP's bucket
views and fused optimizers rely on): an input's gradient has the input's
strides where the input is non-overlapping and dense, else it is contiguous.
The compiled backward writes contiguous gradients, or hands out torch's result
of an extern (a convolution's weight gradient) as torch laid it out (on the
CPU: channels-last for a channels-last weight, no copy) or contiguous, so a
gradient can differ from the contract in two ways. Where it differs only in the strides of size-1 dims
(a [C, K, 1, 1] weight: [K, 1, 1, 1] against channels-last's [K, 1, K, K]),
which address nothing, it is the same memory with the input's strides, no
copy. Where it truly differs (a channels-last or transposed parameter), a
leaf's gradient is copied into the input's layout, the copy AccumulateGrad
would otherwise make itself, unless the leaf has a .grad already (which
AccumulateGrad adds it to in place); a non-leaf's is left as it is, since the
node before it takes any layout (ptc's own backward makes it contiguous).
"""
import weakref

import torch
from torch._functorch.utils import unwrap_dead_wrappers


class _Plan:
    """What CompiledFunction needs of a program that does not change between
    calls, worked out on its first call and kept on the program (its
    ``plan``): a compiled unit is called on every step, and under FSDP a
    model is many such units, so their fixed cost per call counts."""

    __slots__ = ("recorded", "noutputs", "tangent_of", "nondifferentiable", "all_differentiable",
                 "grad_of", "written_into", "nresults")

    def __init__(self, program):
        self.recorded = hasattr(program, "backward_pending")  # a CUDA graph recorder
        self.noutputs = program.noutputs
        self.tangent_of = tuple(program.tangent_of)
        self.nondifferentiable = tuple(k for k, t in enumerate(self.tangent_of) if t < 0)
        self.all_differentiable = not self.nondifferentiable
        self.grad_of = tuple(program.grad_of)
        self.written_into = tuple(getattr(program, "written_into", ()))
        self.nresults = 2 + program.ninputs  # backward: None for program and in_place


def _plan_of(program):
    plan = program.plan
    if plan is None:
        plan = program.plan = _Plan(program)
    return plan


class CompiledFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, program, in_place, *inputs):
        plan = program.plan or _plan_of(program)
        if plan.recorded:  # a recording: saved values as they were
            results = program.forward(*inputs)
            n = plan.noutputs
            outputs, saved, ctx.layout = tuple(results[:n]), results[n:], None
        else:
            outputs, saved, ctx.layout = program.forward_blocks(*inputs)
        ctx.program = program
        ctx.plan = plan
        ctx.save_for_backward(*saved)
        # an output the forward wrote into its input is that input: it is not
        # returned (torch would make a view of it per output, per call) but
        # put back by apply; in_place (a list) says which
        tangent_of, nondifferentiable = plan.tangent_of, plan.nondifferentiable
        if in_place is not None:
            in_place.extend(o for o, i in plan.written_into
                            if outputs[o] is inputs[i] and tangent_of[o] < 0)
            if len(in_place) == len(outputs):  # the node returns something
                in_place.clear()
            if in_place:
                dropped = set(in_place)
                kept = [k for k in range(len(outputs)) if k not in dropped]
                outputs = tuple(outputs[k] for k in kept)
                tangent_of = tuple(tangent_of[k] for k in kept)
                nondifferentiable = tuple(k for k, t in enumerate(tangent_of) if t < 0)
        ctx.tangent_of = tangent_of
        # an output torch gives no gradient comes as None, not as zeros the
        # engine would hold through the whole backward: backward makes them
        ctx.set_materialize_grads(False)
        if plan.recorded:
            ctx.output_meta = [(o.shape, o.dtype, o.device) for o in outputs]
        if nondifferentiable:
            ctx.mark_non_differentiable(*[outputs[k] for k in nondifferentiable])
        ctx.grad_layouts = [_grad_layout(inputs[i]) for i in plan.grad_of]
        if plan.recorded:
            ctx.pending = program.backward_pending()
            ctx.leaves = [weakref.ref(t) if isinstance(t, torch.Tensor) and t.is_leaf else None
                          for t in inputs]
        return outputs

    @staticmethod
    def backward(ctx, *grads):
        if torch.is_grad_enabled():  # backward(create_graph=True)
            raise RuntimeError(
                "ptc: double backward (create_graph=True) through a compiled graph is not "
                "supported: ptc's compiled backward is not differentiable itself; compile "
                "with backend=\"eager\" (or run eagerly) where higher-order gradients are needed")
        plan = ctx.plan
        if plan.recorded:
            return _backward_recorded(ctx, plan, grads)
        if plan.all_differentiable and len(grads) == plan.noutputs:
            inputs = [*ctx.saved_tensors, *[g if g is None else g.contiguous() for g in grads]]
        else:
            inputs = [*ctx.saved_tensors, *[g if g is None else g.contiguous()
                                             for g, t in zip(grads, ctx.tangent_of) if t >= 0]]
        ctx.maybe_clear_saved_tensors()
        # the program holds the saved tensors and gradients alone: each freed
        # after its last read
        grads_in = ctx.program.backward_consuming(inputs, ctx.layout)
        result = [None] * plan.nresults
        for g, want, i in zip(grads_in, ctx.grad_layouts, plan.grad_of):
            result[2 + i] = _fit_layout(g, want)[0]
        return tuple(result)


def _backward_recorded(ctx, plan, grads):
    """CompiledFunction.backward of a CUDA graph recorder (a
    _cudagraphs.TrainGraphs), which reads fixed buffers: an absent gradient
    is zeros, and the recorded outputs are copied where a leaf keeps them
    (grads_for)."""
    program = ctx.program
    tangents = []
    meta = iter(ctx.output_meta)
    for g, t in zip(grads, ctx.tangent_of):
        shape, dtype, device = next(meta)
        if t < 0:
            continue
        tangents.append(g.contiguous() if g is not None
                        else torch.zeros(shape, dtype=dtype, device=device))
    grads_in = program.backward(*ctx.saved_tensors, *tangents)
    fitted = [_fit_layout(g, want) for g, want in zip(grads_in, ctx.grad_layouts)]
    # a recorded backward's outputs are static buffers: what is not a fresh
    # copy already is copied for a leaf (grads_for)
    static = program.grads_for([g if fresh is None else None for g, fresh in fitted], ctx.leaves)
    ctx.pending = None  # the forward recording may be replayed again
    result = [None] * plan.nresults
    for s, (_, fresh), i in zip(static, fitted, plan.grad_of):
        result[2 + i] = s if fresh is None else fresh
    return tuple(result)


def saved_values(node):
    """The tensors a compiled node saved for its backward, one per saved
    value (views into its blocks where the forward placed them there)."""
    saved, layout = node.saved_tensors, node.layout
    if layout is None:
        return saved
    loose, blocks = iter(saved), saved[len(saved) - layout.nblocks - node.program.draws:]
    values = []
    for entry in layout.entries:
        if entry is None:
            values.append(next(loose))
            continue
        block, offset, dtype, sizes = entry
        nbytes = torch.Size(sizes).numel() * torch.empty(0, dtype=dtype).element_size()
        values.append(blocks[block][offset:offset + nbytes].view(dtype).view(sizes))
    return tuple(values)


_layouts = {}  # (an input's sizes, strides) -> its gradient's strides


def _contract_strides(sizes, strides):
    """The strides AccumulateGrad gives the gradient of a tensor of these
    sizes and strides: its own where it is non-overlapping and dense (the
    dims of size > 1, in stride order, each step over all the ones before),
    else contiguous."""
    expected = 1
    for stride, size in sorted((st, sz) for sz, st in zip(sizes, strides) if sz != 1):
        if stride != expected:
            break
        expected *= size
    else:
        return strides
    contiguous, step = [], 1
    for size in reversed(sizes):
        contiguous.append(step)
        step *= max(size, 1)
    return tuple(reversed(contiguous))


def _grad_layout(t):
    """What the gradient of input t must look like: (strides, a weak
    reference to t if it is a leaf, else None)."""
    key = (t.shape, t.stride())
    strides = _layouts.get(key)
    if strides is None:
        if len(_layouts) > 4096:  # sizes that change every call (dynamic shapes)
            _layouts.clear()
        strides = _layouts[key] = _contract_strides(*key)
    return strides, weakref.ref(t) if t.is_leaf else None


def _fit_layout(g, want):
    """Gradient g with the strides want asks for: (g, None) if it has them or
    may keep its own (a non-leaf's, or one added to a leaf's .grad), (g's
    memory with those strides, None) if only the strides of size-1 dims
    differ, else (the copy, the copy) for a leaf's first gradient."""
    strides, leaf_ref = want
    if g is None or g.stride() == strides or g.numel() == 0:
        return g, None
    if all(a == b for a, b, size in zip(g.stride(), strides, g.shape) if size != 1):
        # set_ rather than as_strided: a .grad with no _base, as eager's
        same = g.new_empty(0).set_(g.untyped_storage(), g.storage_offset(), g.shape, strides)
        return same, None
    leaf = leaf_ref() if leaf_ref is not None else None
    if leaf is None or leaf.grad is not None:
        return g, None
    copy = torch.empty_strided(g.shape, strides, dtype=g.dtype, device=g.device)
    copy.copy_(g)
    return copy, copy


# Function.apply's own path (torch.autograd.Function.apply without functorch
# transforms active): its setup_context check and argument binding are for
# Functions that define setup_context, which CompiledFunction does not
_function_apply = super(torch.autograd.Function, CompiledFunction).apply
_functorch_active = torch._C._are_functorch_transforms_active


def apply(program, *inputs):
    """The outputs of program on inputs, recorded as one autograd node."""
    plan = program.plan or _plan_of(program)
    in_place = [] if plan.written_into else None
    if _functorch_active():
        outputs = CompiledFunction.apply(program, in_place, *inputs)
    else:
        outputs = _function_apply(program, in_place, *unwrap_dead_wrappers(inputs))
    if not in_place:
        return outputs
    into = dict(plan.written_into)
    outputs = list(outputs)
    for o in in_place:  # ascending
        outputs.insert(o, inputs[into[o]])
    return tuple(outputs)
