"""What a call gives, compared between eager and ptc.compile: shared by
the capture tests of traced torch functions."""
import ptc


def outcome(fn, args):
    """("ok", the result), or the exception's type and message."""
    try:
        return ("ok", fn(*args))
    except Exception as e:  # noqa: BLE001 - the exception is what is compared
        return (type(e), str(e))


def assert_breaks_like_eager(fn, args, reason, close):
    """fn compiled breaks once, naming `reason`, and gives eager's result
    (compared by close) or raises eager's exception."""
    compiled = ptc.compile(fn)
    got, want = outcome(compiled, args), outcome(fn, args)
    if want[0] == "ok":
        close(got[1], want[1])
    else:
        assert got == want
    ex = ptc.ExplainOutput(list(compiled._events()), None)
    assert ex.break_count == 1 and reason in str(ex.breaks[0]), ex.breaks
