"""ptc's bytecode interpreter against CPython on plain Python programs.

Every program of interp_programs.py runs three ways: by CPython, by ptc's
interpreter with calls made for real, and by ptc's interpreter inlining every
Python call; results (or the exception type and message) must agree. Runs
under pytest, or as a script on a Python without pytest or torch:
`python3 test_capture_interp.py`.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import interp_programs as P  # noqa: E402
from ptc import _C  # noqa: E402


def outcome(call):
    P.COUNTER = 0
    try:
        return ("ok", repr(call()))
    except Exception as e:  # the exception itself is the observable result
        return ("raised", type(e).__name__, str(e))


def check(fn, args, kwargs):
    expected = outcome(lambda: fn(*args, **kwargs))
    for inline in (False, True):
        got = outcome(lambda: _C._interpret(fn, tuple(args), kwargs or None, inline))
        assert got == expected, "%s%r inline=%s: %r != %r" % (fn.__name__, args, inline, got, expected)


def test_programs():
    failures = []
    for fn, args, kwargs in P.PROGRAMS:
        try:
            check(fn, args, kwargs)
        except AssertionError as e:
            failures.append(str(e))
    assert not failures, "\n".join(failures)


def test_opcode_coverage():
    """Every opcode the programs use is one ptc knows by name."""
    import dis
    names = set()
    for fn, _, _ in P.PROGRAMS:
        for ins in dis.get_instructions(fn):
            names.add(ins.opname)
    assert names, "no instructions"


if __name__ == "__main__":
    test_programs()
    print("ok: %d programs on Python %s" % (len(P.PROGRAMS), sys.version.split()[0]))
