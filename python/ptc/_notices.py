"""What ptc was asked to do and does not: one warning per process for each
option, mode or keyword it accepts but does not act on, and the same line in
ptexplain's Notes (its report reads ``recorded()``).

One home for these, so nothing is ignored without a word.
"""
import os
import sys
import warnings

_recorded = []


def not_acted_on(text):
    """Warns once per process with ``text`` (a whole sentence) and records it."""
    if text in _recorded:
        return
    _recorded.append(text)
    warnings.warn("ptc: " + text, UserWarning, stacklevel=_callers_level())


def _callers_level():
    """The stacklevel of the first frame outside the ptc package: the user's call."""
    here = os.path.dirname(__file__)
    frame, level = sys._getframe(2), 2
    while frame is not None and os.path.dirname(frame.f_code.co_filename) == here:
        frame, level = frame.f_back, level + 1
    return level


def recorded():
    """The notices given so far in this process, oldest first."""
    return list(_recorded)
