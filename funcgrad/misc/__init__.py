"""funcgrad.misc: HIPS autograd's ``autograd.misc`` helpers under funcgrad's names, for code written for
autograd: :func:`flatten` and :func:`~funcgrad.misc.flatten.flatten_func` (:mod:`.flatten`), and the
optimizers ``sgd``, ``rmsprop``, ``adam`` with autograd's signatures and arithmetic (:mod:`.optimizers`), and
``fixed_point`` with its implicit derivative (:mod:`.fixed_points`)."""
from .flatten import flatten, flatten_func

__all__ = ["flatten", "flatten_func"]
