"""CI sessions that install ragaudit as a user would: fresh virtualenvs (uv) with only what each needs.

    nox -s judge_matrix                  # every openai major the judge supports (issue 44)
    nox -s "judge_matrix(openai='3')"    # one of them

``judge_matrix``: the judge's tests (``JUDGE_TESTS``, against the loopback chat-completions server of
``tests/support``) in a venv holding only ragaudit (built from this tree, not editable), one openai
release line, pytest and pytest-timeout. The lines: the lowest ``pyproject.toml`` declares (1.40.0, with
``httpx<0.28``, as openai before 1.55.3 needs: it passes httpx's removed ``proxies=``), the newest 2.x,
the newest 3.x (on ``httpx2``), and the newest 3.x beside langchain-openai (which brings ``httpx``: the
two HTTP libraries in one process). Each session prints the versions it ran. uv's cache makes a
repeat run take seconds to install.
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "uv"

# The tests that exercise the judge's endpoint layer: requests and auth on the wire, structured output
# and its fallbacks, faults, deadlines (trickled headers and bodies), the judges built on ChatRagJudge.
JUDGE_TESTS = (
    "tests/test_chat_judge.py",
    "tests/test_judge_hostile.py",
    "tests/test_judge_protocols.py",
    "tests/test_full_audit.py",
    "tests/test_correctness_judge.py",
    "tests/test_rubric_judge.py",
    "tests/test_geval.py",
    "tests/test_pairwise.py",
    "tests/test_judge_cache.py",
)

# id -> what is installed beside ragaudit: an openai release line (and what that line needs).
OPENAI_LINES = {
    "1.40.0": ("openai==1.40.0", "httpx<0.28"),
    "2": ("openai>=2,<3",),
    "3": ("openai>=3,<4",),
    "3+langchain-openai": ("openai>=3,<4", "langchain-openai"),
}


_PRINT_VERSIONS = """
import importlib.metadata as m
found = []
for name in ("ragaudit", "openai", "httpx", "httpx2", "langchain-openai"):
    try:
        found.append(f"{name}=={m.version(name)}")
    except m.PackageNotFoundError:
        pass
print("judge_matrix versions:", " ".join(found))
"""


@nox.session(venv_backend="uv", reuse_venv=False)
@nox.parametrize("openai", list(OPENAI_LINES))
def judge_matrix(session: nox.Session, openai: str) -> None:
    """The judge's tests against one openai release line, in a venv with nothing else of ours."""
    session.install(".", *OPENAI_LINES[openai], "pytest>=8", "pytest-timeout>=2.2")
    session.run("python", "-c", _PRINT_VERSIONS)
    session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not e2e and not slow",
                *JUDGE_TESTS, *session.posargs)
