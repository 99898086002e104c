"""One compiled call, one autograd node: the Function that runs a graph's
compiled forward and, when torch's backward reaches it, its compiled
backward (compiler/capture/backend/backend_train.c builds both).

The forward returns the outputs and the tensors the backward needs
(``program.forward``); they are kept with ``save_for_backward``, so torch's
checks on saved tensors (a later in-place write, ``retain_graph``) apply.
Outputs that do not depend on an input requiring gradients are marked
non-differentiable, as eager leaves them. The backward is not itself
differentiable: ``create_graph=True`` through it raises an error saying so.

Under reduce-overhead on CUDA the program is a ``_cudagraphs.TrainGraphs``,
which replays recorded forwards and backwards: the node holds its forward
recording until its backward has run (``backward_pending``), and gradients
for leaves pass through ``grads_for``.
"""
import weakref

import torch


class CompiledFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, program, *inputs):
        results = program.forward(*inputs)
        n = program.noutputs
        outputs, saved = results[:n], results[n:]
        ctx.program = program
        ctx.save_for_backward(*saved)
        ctx.output_meta = [(o.shape, o.dtype, o.device) for o in outputs]
        ctx.mark_non_differentiable(*[o for o, t in zip(outputs, program.tangent_of) if t < 0])
        if hasattr(program, "backward_pending"):
            ctx.pending = program.backward_pending()
            ctx.leaves = [weakref.ref(t) if isinstance(t, torch.Tensor) and t.is_leaf else None
                          for t in inputs]
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grads):
        if torch.is_grad_enabled():  # backward(create_graph=True)
            raise RuntimeError(
                "ptc: double backward (create_graph=True) through a compiled graph is not "
                "supported: ptc's compiled backward is not differentiable itself; compile "
                "with backend=\"eager\" (or run eagerly) where higher-order gradients are needed")
        program = ctx.program
        tangents = []
        for g, t, (shape, dtype, device) in zip(grads, program.tangent_of, ctx.output_meta):
            if t < 0:
                continue
            tangents.append(torch.zeros(shape, dtype=dtype, device=device) if g is None
                            else g.contiguous())
        grads_in = program.backward(*ctx.saved_tensors, *tangents)
        if hasattr(program, "backward_pending"):
            grads_in = program.grads_for(grads_in, ctx.leaves)
            ctx.pending = None  # the forward recording may be replayed again
        result = [None] * (1 + program.ninputs)
        for g, i in zip(grads_in, program.grad_of):
            result[1 + i] = g
        return tuple(result)


def apply(program, *inputs):
    """The outputs of program on inputs, recorded as one autograd node."""
    return CompiledFunction.apply(program, *inputs)
