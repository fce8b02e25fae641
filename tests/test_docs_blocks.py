"""Every python example of the guides is run by a test: the blocks are written so that
the tests find them (``python`` fences at the line's start), every guide that has some
is run by a test naming it (``run_doc``, or ``doc_python_blocks`` for the Spark guide),
the comments that say what a ``print`` shows are read as the examples' writers mean them
(the convention of ``run_doc``, tests/conftest.py), and ``run_doc`` fails an exception
printed by a run whose exit status is 0."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
#: A fence whose language is Python's in some spelling, indented or not.
PYTHON_LIKE_FENCE = re.compile(r"^[ \t]*```[ \t]*(py|python|python3|pycon|ipython)\b.*$",
                               re.I | re.M)


def runs_guide(test_source: str, doc: str) -> bool:
    """Whether a test module runs ``doc``'s blocks: ``run_doc("docs/x.md", ...)``, or
    ``doc = "docs/x.md"`` and ``doc_python_blocks(doc)`` (the Spark guide's test)."""
    quoted = re.escape(f'"{doc}"')
    return bool(re.search(rf"run_doc\(\s*{quoted}", test_source)
                or (re.search(rf"\bdoc = {quoted}", test_source)
                    and "doc_python_blocks(doc)" in test_source))


def test_every_python_fence_is_one_the_tests_read(doc_python_blocks):
    for guide in GUIDES:
        text = guide.read_text(encoding="utf-8")
        fences = [m.group(0) for m in PYTHON_LIKE_FENCE.finditer(text)]
        odd = [fence for fence in fences if fence != "```python"]
        assert not odd, f"{guide.name}: python fences the tests do not read: {odd}"
        assert len(doc_python_blocks(guide.relative_to(ROOT).as_posix())) == len(fences)


def test_every_guide_with_python_blocks_is_run_by_a_test(doc_python_blocks):
    tests = [p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("test_*.py")]
    with_blocks = [doc for doc in (g.relative_to(ROOT).as_posix() for g in GUIDES)
                   if doc_python_blocks(doc)]
    assert "docs/producer.md" in with_blocks and "docs/spark.md" in with_blocks
    unrun = [doc for doc in with_blocks if not any(runs_guide(t, doc) for t in tests)]
    assert not unrun, f"python blocks that no test runs (see test_docs_examples.py): {unrun}"


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


def test_run_doc_fails_an_exception_the_exit_status_hides(run_doc, tmp_path):
    guide = tmp_path / "guide.md"
    example = "```python\nimport threading\n%s\nprint('done')   # done\n```\n"
    guide.write_text(example % "threading.Thread(target=lambda: None).start()")
    assert run_doc(str(guide)).stdout == "done\n"
    guide.write_text(example % "threading.Thread(target=lambda: 1 / 0).start()")
    with pytest.raises(pytest.fail.Exception, match=r"exit status 0, .*Traceback"):
        run_doc(str(guide))
