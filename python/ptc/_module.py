"""The nn.Module wrapper ptc.compile returns for a module.

The wrapper is an instance of a subclass of the module's own class made for
it, sharing the original's __dict__: attributes, parameters, buffers,
submodules, hooks and the training flag are the very same objects, so
attribute writes, state_dict(), load_state_dict(), train()/eval() and
optimisers see one module. Only calling it differs: __call__ runs the
compiled forward (which notices hooks and train/eval switches through its
guards). The original stays reachable as `_orig_mod`.
"""
from . import _C, _distributed


class OptimizedModule:
    """Marker base of every module wrapper made by ptc.compile."""

    _orig_mod = None
    _ptc_compiled = None


def wrap_module(mod, backend, fullgraph, dynamic, mode):
    if isinstance(mod, OptimizedModule):
        mod = mod._orig_mod
    compiled = _C._compile(mod, backend, fullgraph, dynamic, mode)
    return sharing_wrapper(mod, {"__call__": staticmethod(_distributed.ddp_aware(compiled)),
                                 "_ptc_compiled": compiled})


def sharing_wrapper(mod, namespace):
    """An instance of a subclass of mod's class with `namespace` added,
    sharing mod's __dict__ (see the module's docstring)."""
    cls = type(mod)
    namespace = dict(namespace, **{
        "_orig_mod": mod,
        "__module__": cls.__module__,
        "__qualname__": "Optimized" + cls.__qualname__,
        # Pickling or deep-copying the wrapper gives the plain module back.
        "__reduce_ex__": lambda self, protocol: mod.__reduce_ex__(protocol),
        "__deepcopy__": lambda self, memo: __import__("copy").deepcopy(mod, memo),
    })
    sub = type("Optimized" + cls.__name__, (OptimizedModule, cls), namespace)
    opt = object.__new__(sub)
    object.__setattr__(opt, "__dict__", mod.__dict__)
    return opt
