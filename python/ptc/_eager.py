"""Torch calls for ops of ptc's graphs that have no torch function of the
same form (compiler/capture/backend/backend.c's eager steps, backend_ptc.c's
externs):

- ops whose torch form writes its inputs in place: ptc's graphs are
  functional (an input written in place is an output, copied into the
  caller's tensor after the graph), so these return the new values instead;
- ops that are one output of a torch op with several (the weight gradient of
  a convolution, from aten.convolution_backward: cuDNN / oneDNN);
- ops torch runs faster in another form (a transposed convolution).
"""
import torch


def batch_norm_update(input, weight, bias, running_mean, running_var, training, momentum,
                      eps, cudnn_enabled):
    """torch.batch_norm in training mode: [output, new running_mean, new running_var],
    the caller's running statistics untouched."""
    mean, var = running_mean.clone(), running_var.clone()
    out = torch.batch_norm(input, weight, bias, mean, var, training, momentum, eps,
                           cudnn_enabled)
    return [out, mean, var]


def _convolution_backward(grad_output, input, weight, stride, padding, dilation, groups,
                          output_mask):
    """aten.convolution_backward of torch.convolution(input, weight, None, stride,
    padding, dilation, False, 0, groups): the gradients output_mask asks for."""
    k = weight.dim() - 2
    stride, padding, dilation = ([v[0]] * k if len(v) == 1 else list(v)
                                 for v in (stride, padding, dilation))
    return torch.ops.aten.convolution_backward(
        grad_output, input, weight, None, stride, padding, dilation, False, [0] * k, groups,
        output_mask)


def convolution_backward_weight(grad_output, input, weight, stride, padding, dilation, groups):
    """The weight's gradient of that convolution given the gradient of its output."""
    return _convolution_backward(grad_output, input, weight, stride, padding, dilation, groups,
                                 [False, True, False])[1]


def convolution_transposed(input, weight, bias, stride, padding, dilation, transposed,
                           output_padding, groups):
    """torch.convolution(..., transposed=True, ...). Without bias on the CPU (the
    input gradient of a convolution, as ptc's backward writes it) it is the
    input gradient of aten.convolution_backward instead: torch runs CPU
    transposed convolutions with a slower kernel than oneDNN's backward-data
    (resnet18's 512-channel 3x3 layer at 2x2, batch 8: 76 ms against 43 ms
    on this loaded CPU, one thread)."""
    if bias is not None or input.device.type != "cpu":
        return torch.convolution(input, weight, bias, stride, padding, dilation, transposed,
                                 output_padding, groups)
    k = weight.dim() - 2
    stride, padding, dilation, output_padding = (
        [v[0]] * k if len(v) == 1 else list(v)
        for v in (stride, padding, dilation, output_padding))
    size = [input.shape[0], weight.shape[1] * groups] + [
        (input.shape[2 + i] - 1) * stride[i] - 2 * padding[i]
        + dilation[i] * (weight.shape[2 + i] - 1) + output_padding[i] + 1 for i in range(k)]
    like = input.new_empty(size)  # only its shape is read
    return torch.ops.aten.convolution_backward(
        input, like, weight, None, stride, padding, dilation, False, [0] * k, groups,
        [True, False, False])[0]



def convolution_backward(grad_output, input, weight, stride, padding, dilation, groups):
    """The input's and the weight's gradients in one call, as eager's backward makes
    (oneDNN / cuDNN compute both from one pass over grad_output)."""
    grad_input, grad_weight, _ = _convolution_backward(
        grad_output, input, weight, stride, padding, dilation, groups, [True, True, False])
    return grad_input, grad_weight
