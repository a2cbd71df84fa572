"""The exception types funcgrad raises.

Owns every error class. Errors about the user's code carry the user's file,
line, column and source text (the way ``SyntaxError`` does) plus a hint of
what to write instead.
"""
from __future__ import annotations


class FuncgradError(Exception):
    """Base class of funcgrad's own errors."""


class TreeStructureError(FuncgradError, ValueError):
    """Two pytrees that must have the same structure do not."""


class UnsupportedSyntaxError(SyntaxError, FuncgradError):
    """The function uses a construct the source transformation does not support.

    Carries ``filename``, ``lineno``, ``offset`` and ``text`` like ``SyntaxError``,
    plus ``hint``.
    """

    def __init__(self, msg, filename=None, lineno=None, offset=None, text=None, hint=None):
        self.hint = hint
        full = msg if not hint else f"{msg}\n  hint: {hint}"
        super().__init__(full, (filename, lineno, offset, text))
        self.msg = full

    def __str__(self):
        loc = f"{self.filename}:{self.lineno}" if self.filename else "<unknown>"
        text = f"\n    {self.text.strip()}" if self.text else ""
        return f"{loc}: {self.msg}{text}"


class ArgumentTypeError(FuncgradError, TypeError):
    """An argument a transform was asked to differentiate is not floating-point (an int, a bool)."""


class NoDerivativeError(FuncgradError, TypeError):
    """A call inside a differentiated function has no registered derivative rule."""

    def __init__(self, msg, filename=None, lineno=None, text=None):
        self.filename, self.lineno, self.text, self.msg = filename, lineno, text, msg
        loc = f"{filename}:{lineno}: " if filename else ""
        src = f"\n    {text.strip()}" if text else ""
        super().__init__(f"{loc}{msg}{src}")


# An ``assert`` in one of funcgrad's own definitions over primitives (funcgrad/ops/second_order.py) is a refusal
# (a derivative that does not exist, found while the code runs). Generated code keeps it as an ``assert`` whose
# message starts with this mark; the transform that ran it raises NoDerivativeError at the user's line instead.
REFUSAL_MARK = "funcgrad refuses: "


class TransformError(FuncgradError):
    """A problem found while transforming the user's code (types, shapes, names), at the user's line."""

    def __init__(self, msg, filename=None, lineno=None, text=None):
        self.filename, self.lineno, self.text, self.msg = filename, lineno, text, msg
        loc = f"{filename}:{lineno}: " if filename else ""
        src = f"\n    {text.strip()}" if text else ""
        super().__init__(f"{loc}{msg}{src}")


# The same for a construct supported for some values only, found unsupported for the values met while running
# (a list grown at run time whose items change shape): RunValueError at the user's line.
UNSUPPORTED_MARK = "funcgrad cannot run this: "


class RunValueError(TransformError, ValueError):
    """A construct funcgrad supports for some values met others it cannot run (a list grown at run time
    whose items change shape), found while the generated code ran; reported at the user's line."""


class CompileError(TransformError):
    """Numba could not compile the generated code of a function forced to ``mode="njit"``."""


class DeviceError(FuncgradError, TypeError):
    """Host and device arrays mixed in one call or one operation, or GPU code asked for something the GPU
    backend does not run (yet); at the user's line where one is known."""

    def __init__(self, msg, filename=None, lineno=None, text=None):
        self.filename, self.lineno, self.text, self.msg = filename, lineno, text, msg
        loc = f"{filename}:{lineno}: " if filename else ""
        src = f"\n    {text.strip()}" if text else ""
        super().__init__(f"{loc}{msg}{src}")


class FuncgradWarning(UserWarning):
    """Something funcgrad did differently from what was asked, and why (e.g. an ``auto`` fallback)."""
