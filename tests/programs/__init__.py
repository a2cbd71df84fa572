"""Real programs, written the way an autograd user writes them (issue 15), differentiated unedited.

Each module is one program. Besides the program itself it defines ``make_inputs(seed=0, size="small")``
returning ``(args, kwargs)`` for its objective, and ``PROGRAM``, a dict the tests and the benchmark read:
``f`` (the objective's name), ``argnums``, ``njit`` (True when the program compiles whole with Numba;
otherwise ``jit="whole"`` must refuse it at one of its lines), ``autograd`` (True, or the reason the
same source cannot run under HIPS autograd, e.g. it writes into arrays in place) and optionally ``heavy``
(its whole-function Numba compile takes tens of seconds cold: those runs are ``make test-sweep``'s).
"""
NAMES = [
    "mlp", "convnet", "rnn", "lstm", "vae", "gp", "bbvi", "gmm", "hmm", "ica", "wave", "ode_rk4",
    "bundle", "logreg_class",
]
