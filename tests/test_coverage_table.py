"""The README's coverage table is what the registry holds (tests/coverage_table.py makes it)."""
import os

from tests.coverage_table import BEGIN, END, entries, markdown

README = os.path.join(os.path.dirname(__file__), "..", "README.md")


def test_readme_table_is_the_registrys():
    text = open(README, encoding="utf-8").read()
    assert BEGIN in text and END in text, "README lost its coverage markers"
    current = text[text.index(BEGIN):text.index(END) + len(END)]
    assert current == markdown(), "README's coverage table is stale: run `python -m tests.coverage_table` and paste it"


def test_table_lists_the_modules_users_call():
    t = entries()
    for mod, name in [("numpy", "tanh"), ("numpy.linalg", "slogdet"), ("numpy.fft", "rfft"),
                      ("scipy.special", "gammaln"), ("scipy.stats", "norm.logpdf"), ("scipy.integrate", "odeint")]:
        assert t[mod][name][0] == "rule", (mod, name)
    assert t["numpy"]["argmax"][0] == "zero"
