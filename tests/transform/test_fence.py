"""fence: what the later passes cannot handle is refused at the user's line, with a hint."""
import pytest

from funcgrad.errors import UnsupportedSyntaxError
from funcgrad.transform.fence import check
from funcgrad.transform.parse import parse
from tests.transform import _programs as P


def test_try_is_refused_at_its_line_with_a_hint():
    with pytest.raises(UnsupportedSyntaxError) as ei:
        check(parse(P.with_try), allow_control_flow=True)
    e = ei.value
    assert e.filename == P.__file__ and "try" in e.text and e.hint


def test_supported_functions_pass():
    for f in (P.straight, P.looped, P.early, P.swap, P.writes):
        check(parse(f), allow_control_flow=True)


def test_control_flow_can_be_switched_off():
    with pytest.raises(UnsupportedSyntaxError, match="'for' loop"):
        check(parse(P.looped), allow_control_flow=False)
