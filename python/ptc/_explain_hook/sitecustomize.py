"""ptexplain's start-up hook for the processes a script under ptexplain
starts (its ranks): ptexplain puts this folder first on PYTHONPATH and sets
PTC_EXPLAIN_CHILD=1. Once the process imports torch, ptc measures it and
routes torch.compile to ptc.compile (ptc._explain.measure_this_process); a
process that never imports torch pays one import hook. The sitecustomize
this one hides, if any, runs as well."""
import os
import sys


def _after_torch_import():
    import importlib.abc
    import importlib.util

    class TorchImported(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name != "torch":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            exec_module = spec.loader.exec_module

            def run(module):
                exec_module(module)
                try:
                    import ptc._explain

                    ptc._explain.measure_this_process()
                except Exception as e:  # ptexplain's report misses this process; the program runs on
                    sys.stderr.write("ptexplain: this process (pid %d) is not measured: %s\n"
                                     % (os.getpid(), e))

            spec.loader.exec_module = run
            return spec

    sys.meta_path.insert(0, TorchImported())


def _run_hidden_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    ours = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name != "sitecustomize":
            raise
    finally:
        sys.path[:] = saved
        if ours is not None:
            sys.modules.setdefault("sitecustomize", ours)


if os.environ.get("PTC_EXPLAIN_CHILD") == "1" and "torch" not in sys.modules:
    _after_torch_import()
_run_hidden_sitecustomize()
