"""Python's own exceptions from bad arguments (TypeError, ValueError, ...) raised as
posenc.UsageError, so that a caller catches posenc.Error alone."""

import functools

from ._posenc import UsageError

# What a bad argument can make Python or numpy raise inside the package.
_PYTHON_ERRORS = (TypeError, ValueError, IndexError, KeyError, AttributeError, OverflowError)


def first_line(e):
    """The first line of an exception's message (its type's name when it has none)."""
    lines = str(e).splitlines()
    return lines[0] if lines else type(e).__name__


def usage_errors(f):
    """`f` raising UsageError ("f: why") where a bad argument made Python raise one of
    _PYTHON_ERRORS. A call Python itself refuses (an unknown keyword, a missing
    argument) stays a TypeError, as for any Python function."""

    @functools.wraps(f)
    def call(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except _PYTHON_ERRORS as e:
            if e.__traceback__.tb_next is None:
                raise  # raised by the call itself, not in f
            raise UsageError(f"{f.__name__}: {first_line(e)}") from None

    return call
