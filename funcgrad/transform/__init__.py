"""The source transformation: parse -> fence -> normalize -> anf -> reverse -> emit.

One pass per module; each module's docstring states what its output
guarantees. :mod:`.pipeline` runs them in order for one call signature.
(``funcgrad.source(f)``, the function that shows generated code, lives in
:mod:`funcgrad.api`.)
"""
