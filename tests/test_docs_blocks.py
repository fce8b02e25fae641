"""The comments of the guides' examples that say what a ``print`` shows are read as their
writers mean them (the convention of ``run_doc``, tests/conftest.py)."""
from __future__ import annotations

import pytest


def test_print_claims_are_the_comments_after_prints(doc_print_claims):
    code = '''\
print("a", 1)          # a 1
print("b")
# b
print("c",
      "d")             # c d
print("e")
x = [print("not a statement start")]   # not a claim
print("no claim")

def f():
    print("in a function")   # in a function
'''
    claims = doc_print_claims(code)
    assert [(c.line, c.text) for c in claims] == [
        (1, "a 1"), (3, "b"), (5, "c d"), (11, "in a function")]


def test_print_claims_match_whole_lines_with_placeholders(doc_print_claims):
    [claim] = doc_print_claims("print(x)   # (1, <a time in ms>) and ... [('n', b'1')]\n")
    assert claim.pattern.fullmatch("(1, 1700000000000) and more [('n', b'1')]")
    assert not claim.pattern.fullmatch("(1, 17) and more [('n', b'2')]")
    assert not claim.pattern.fullmatch("x (1, 17) and more [('n', b'1')]")


def test_print_claims_are_checked_in_order(check_print_claims):
    code = 'print(1)   # first\nprint(2)   # second\n'
    check_print_claims("guide.md", code, "first\nnoise\nsecond\n")
    with pytest.raises(pytest.fail.Exception, match=r"guide.md:2: .*'second'"):
        check_print_claims("guide.md", code, "second\nfirst\n")
    with pytest.raises(pytest.fail.Exception, match=r"guide.md:1: .*'first'"):
        check_print_claims("guide.md", code, "firsts\nsecond\n")
