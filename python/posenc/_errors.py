"""Python's own exceptions from bad arguments (TypeError, ValueError, ...) raised as
posenc.UsageError, so that a caller catches posenc.Error alone."""

import functools
import inspect

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


def with_arguments(f):
    """`f(args, q, ...)` offered as `f(q, ...)`: `args` maps each parameter to its value
    in the call (defaults filled in), so that f reads declared keywords by name from the
    call, not from its own locals(). inspect and help() show f's signature without `args`;
    a call that does not fit it is refused by Python's own call of f (a TypeError; put this
    outside usage_errors, which keeps it one)."""
    own = inspect.signature(f)
    shown = own.replace(parameters=tuple(own.parameters.values())[1:])
    positional = [p.name for p in shown.parameters.values() if p.kind == p.POSITIONAL_OR_KEYWORD]
    defaults = {p.name: p.default for p in shown.parameters.values() if p.default is not p.empty}

    @functools.wraps(f)
    def call(*args, **kwargs):
        given = dict(defaults)
        given.update(zip(positional, args))
        given.update(kwargs)
        return f(given, *args, **kwargs)

    call.__signature__ = shown
    return call
