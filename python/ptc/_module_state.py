"""ptc.config.trust_module_state: the module epoch.

While the setting is on, every way nn.Module offers to change a module's
state bumps an epoch in ptc._C before it runs: attribute writes and
deletions (which is also how train()/eval(), parameter, buffer and submodule
replacement happen), parameter/buffer/submodule registration, hook
registration and removal, _apply (to(), half(), cuda()), and the editing
methods of the containers. A cache hit whose epoch did not move takes the
module-held values it kept and skips the guards they imply. Writes that go
around these methods are not seen (see man ptc(7)).
"""
import functools

from . import _C

_MODULE_METHODS = (
    "__setattr__", "__delattr__", "__setstate__", "register_parameter", "register_buffer",
    "add_module", "register_module", "_apply", "register_forward_hook",
    "register_forward_pre_hook", "register_full_backward_hook",
    "register_full_backward_pre_hook", "register_backward_hook",
)
_CONTAINER_METHODS = (
    "__setitem__", "__delitem__", "__iadd__", "insert", "append", "extend", "pop", "clear",
    "update", "popitem", "setdefault",
)
_CONTAINERS = ("Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict")

_installed = False


def _wrap(owner, name):
    orig = owner.__dict__.get(name)
    if orig is None or getattr(orig, "_ptc_bumps_epoch", False):
        return
    bump = _C._module_state_changed

    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        bump()
        return orig(*args, **kwargs)

    wrapper._ptc_bumps_epoch = True
    wrapper.__ptc_wrapped__ = orig  # what a trace follows (compiler/capture/interp/calls.c)
    setattr(owner, name, wrapper)


def install():
    """Wraps nn.Module's state-changing methods (once per process)."""
    global _installed
    if _installed:
        return
    import torch
    import torch.utils.hooks

    for name in _MODULE_METHODS:
        _wrap(torch.nn.Module, name)
    for cls_name in _CONTAINERS:
        cls = getattr(torch.nn, cls_name, None)
        for name in _CONTAINER_METHODS if cls is not None else ():
            _wrap(cls, name)
    _wrap(torch.utils.hooks.RemovableHandle, "remove")
    _installed = True
