"""Where the generator's choices come from.

The program generator (``gen.py``) makes every decision through a *drawer*
with two calls, ``integer(lo, hi)`` and ``choice(options)``. Three drawers feed it:

* ``HypothesisDrawer``: draws through hypothesis, so the CI test shrinks failures;
* ``RandomDrawer``: draws from a seeded ``random.Random`` and records every choice,
  so the long run (``make fuzz``) keeps going after failures and can replay any program;
* ``ReplayDrawer``: replays a recorded choice sequence (choices past its end draw the
  smallest option), which is what ``shrink_choices`` edits to minimize a failing program.

Options are always listed simplest first, so "smaller choice" means "simpler program"
for both hypothesis's shrinker and ours.
"""
from __future__ import annotations

import random
import time


class Drawer:
    def integer(self, lo, hi):  # pragma: no cover - interface
        raise NotImplementedError

    def choice(self, options):
        options = list(options)
        if not options:
            raise ValueError("choice from no options")
        return options[self.integer(0, len(options) - 1)]

    def boolean(self):
        return self.integer(0, 1) == 1


class HypothesisDrawer(Drawer):
    def __init__(self, draw):
        from hypothesis import strategies as st
        self._draw = draw
        self._st = st
        self._cache = {}

    def integer(self, lo, hi):
        if lo == hi:
            return lo
        s = self._cache.get((lo, hi))
        if s is None:
            s = self._cache[(lo, hi)] = self._st.integers(lo, hi)
        return self._draw(s)


class RandomDrawer(Drawer):
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.choices: list[int] = []

    def integer(self, lo, hi):
        if lo == hi:
            return lo
        v = self.rng.randint(lo, hi)
        self.choices.append(v - lo)
        return v


class ReplayDrawer(Drawer):
    def __init__(self, choices):
        self.src = list(choices)
        self.pos = 0
        self.choices: list[int] = []

    def integer(self, lo, hi):
        if lo == hi:
            return lo
        if self.pos < len(self.src):
            v = lo + min(self.src[self.pos], hi - lo)
        else:
            v = lo
        self.pos += 1
        self.choices.append(v - lo)
        return v


def shrink_choices(choices, still_fails, max_tries=200, max_seconds=300.0):
    """A small Conjecture-style shrinker over a recorded choice sequence.

    ``still_fails(choices) -> bool`` replays a sequence; the sequence kept is the
    shortest/smallest one found for which it stays true. Passes: delete spans,
    zero single choices, lower single choices. Returns the best sequence.
    """
    best = list(choices)
    tries = 0
    t0 = time.monotonic()

    def attempt(c):
        nonlocal best, tries
        if tries >= max_tries or time.monotonic() - t0 > max_seconds:
            return False
        if c == best:
            return False
        tries += 1
        if still_fails(c):
            best = c
            return True
        return False

    # cut the tail first: choices past the end replay as the simplest option
    cut = len(best) // 2
    while cut >= 1:
        if not attempt(best[:len(best) - cut]):
            cut //= 2
    improved = True
    while improved and tries < max_tries and time.monotonic() - t0 < max_seconds:
        improved = False
        for span in (16, 8, 4, 2, 1):
            i = 0
            while i + span <= len(best):
                if attempt(best[:i] + best[i + span:]):
                    improved = True
                else:
                    i += 1 if span == 1 else max(1, span // 2)
        for i in range(len(best)):
            if i < len(best) and best[i] > 0:
                if attempt(best[:i] + [0] + best[i + 1:]):
                    improved = True
                elif i < len(best) and best[i] > 1 and attempt(best[:i] + [best[i] // 2] + best[i + 1:]):
                    improved = True
                elif i < len(best) and best[i] > 0 and attempt(best[:i] + [best[i] - 1] + best[i + 1:]):
                    improved = True
    return best
