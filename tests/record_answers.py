"""A pytest plugin that records every answer the function gives, to prove a refactor changed none.

``python -m pytest -p tests.record_answers --answers=FILE tests/test_upgrade.py ...`` writes one
line per ``fn.answer`` call: the test, the SHA-256 of the request and of the answer, both
serialized deterministically. Run it on the tree before a change and on the tree after, then
``python -m tests.record_answers BEFORE AFTER``: it names the first call whose answer differs
(or whose request does: an earlier answer moved the in-memory Crossplane elsewhere) and exits 1.
The tests it is meant for run on their own clocks (the in-memory Crossplane's, a fleet's): a
test that answers on the wall clock records differing answers from run to run.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from function import fn

_CURRENT: dict[str, str] = {"test": ""}


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--answers FILE``: where the record goes."""
    parser.addoption("--answers", default="", help="record every answer's digest into FILE")


@pytest.fixture(autouse=True)
def _record_answers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    out = request.config.getoption("--answers")
    if not out:
        yield
        return
    original = fn.answer

    def recorded(req: Any, log: Any = None, now: float | None = None) -> fn.Answer:
        got = original(req, log, now)
        digest_req = hashlib.sha256(req.SerializeToString(deterministic=True)).hexdigest()[:16]
        digest_rsp = hashlib.sha256(got.response.SerializeToString(deterministic=True)).hexdigest()[:16]
        with Path(out).open("a", encoding="utf-8") as f:
            f.write(f"{request.node.nodeid}\t{digest_req}\t{digest_rsp}\n")
        return got

    monkeypatch.setattr(fn, "answer", recorded)
    yield


def _by_test(path: Path) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        test, req, rsp = line.split("\t")
        out.setdefault(test, []).append((req, rsp))
    return out


def compare(before: Path, after: Path) -> str:
    """"" if every test gave the same answers in the same order, else the tests that did not.

    Test by test, so that one test failing in a run does not shift the others. A test whose
    requests differ while its answers do not (a clock or a uid of its own) counts as the same.
    """
    old, new = _by_test(before), _by_test(after)
    problems = [f"{t}: only before" for t in old if t not in new]
    problems += [f"{t}: only after" for t in new if t not in old]
    for test in (t for t in old if t in new):
        a, b = [rsp for _, rsp in old[test]], [rsp for _, rsp in new[test]]
        if a != b:
            n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            problems.append(f"{test}: answer {n + 1} of {len(a)} (after: {len(b)}) differs")
    return "\n".join(problems)


if __name__ == "__main__":
    problem = compare(Path(sys.argv[1]), Path(sys.argv[2]))
    if problem:
        print(problem)
        sys.exit(1)
    tests = _by_test(Path(sys.argv[1]))
    print(f"{sum(map(len, tests.values()))} answers of {len(tests)} tests identical")
