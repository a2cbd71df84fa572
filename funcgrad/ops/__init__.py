"""Every primitive, declared once (forward + VJP template side by side).

``load_all()`` imports every module that declares primitives, so the registry
is complete before a transformation or the registry-driven test runs.
"""
_LOADED = False


def load_all():
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    from . import core  # noqa: F401  numpy primitives
    import importlib
    for mod in ("funcgrad.nn",):
        try:
            importlib.import_module(mod)
        except ImportError as e:  # pragma: no cover - only while nn is being written
            if getattr(e, "name", None) != mod:
                raise
