"""CI installs like a user (issue 44): each session is a fresh virtualenv (uv) holding only what a page or an
extra says to install, ragaudit from this checkout in place of the PyPI name, everything else at today's
newest versions -- or, in ``lowest``, at the lowest versions pyproject.toml allows.

    nox -s user_install      # every quick start, every extra, the lowest versions (``make user-install``)
    nox -s quickstart        # the quick starts only; ``nox -s "quickstart(page='llamaindex')"`` one of them

Each session keeps to itself (its own imports and constants): sessions of other concerns are added to this
file beside them. Figures (time from an empty venv to the first judged answer, versions) go to
``.nox/user-install/*.json``.

The openai judge matrix (issue 44):

    nox -s judge_matrix                  # every openai major the judge supports (issue 44)
    nox -s "judge_matrix(openai='3')"    # one of them

``judge_matrix``: the judge's tests (``JUDGE_TESTS``, against the loopback chat-completions server of
``tests/support``) in a venv holding only ragaudit (built from this tree, not editable), one openai
release line, pytest and pytest-timeout. The lines: the lowest ``pyproject.toml`` declares (1.55.3: openai before it
passes httpx's removed ``proxies=``), the newest 2.x,
the newest 3.x (on ``httpx2``), and the newest 3.x beside langchain-openai (which brings ``httpx``: the
two HTTP libraries in one process). Each session prints the versions it ran. uv's cache makes a
repeat run take seconds to install.
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "uv"
nox.options.reuse_venv = "no"
nox.options.error_on_missing_interpreters = True


# -- the quick starts, installed and run as each page says ----------------------------------------------------

QUICK_STARTS = ("langchain", "llamaindex", "otlp-worker")


@nox.session(venv_backend="uv")
@nox.parametrize("page", QUICK_STARTS)
def quickstart(session: nox.Session, page: str) -> None:
    """The page's ``<!-- quickstart: install -->`` lines into an empty venv, then its marked code, as written,
    against the loopback model and judge (tests/support/quickstart.py); passes when the first answer is judged."""
    import json
    import re
    import sys
    import time
    from pathlib import Path

    started = time.time()  # the venv is empty: nothing installed yet
    root = Path(__file__).resolve().parent
    sys.path.insert(0, str(root))  # the page parser, stdlib only
    from tests.support.quickstart import install_requirements

    path = root / "docs" / "quickstart" / f"{page}.md"
    # 'ragaudit[x,y]' is this checkout with those extras; everything else as written, newest versions.
    wanted = [re.sub(r"^ragaudit(?=\[|$)", str(root), req) for req in install_requirements(path)]
    session.install(*wanted)
    installed = time.time()
    out = root / ".nox" / "user-install" / f"quickstart-{page}.json"
    session.run("python", "-m", "tests.support.quickstart", str(path), "--json", str(out))
    result = json.loads(out.read_text(encoding="utf-8"))
    result.update(install=wanted, install_s=round(installed - started, 2),
                  empty_venv_to_first_judged_s=round(result["first_judged_at"] - started, 2))
    out.write_text(json.dumps(result, indent=1, sort_keys=True), encoding="utf-8")
    session.log(f"{page}: first judged answer {result['empty_venv_to_first_judged_s']}s after an empty venv "
                f"(install {result['install_s']}s); {result['versions']}")


# -- each extra alone -------------------------------------------------------------------------------------------

EXTRAS = ("langchain", "llamaindex", "chroma", "otlp", "langfuse", "phoenix", "worker", "worker-grpc", "redis",
          "prices", "demo", "docs")


@nox.session(venv_backend="uv")
@nox.parametrize("extra", EXTRAS)
def extra(session: nox.Session, extra: str) -> None:
    """``pip install 'ragaudit[EXTRA]'`` and nothing else, then what that extra is for (tests/support/extras.py;
    the docs extra builds the site with ``mkdocs build --strict``)."""
    import tempfile
    from pathlib import Path

    root = Path(__file__).resolve().parent
    session.install(f"{root}[{extra}]")
    if extra == "docs":
        with tempfile.TemporaryDirectory() as site:
            session.run("mkdocs", "build", "--strict", "--site-dir", site, env={"NO_MKDOCS_2_WARNING": "1"})
        return
    session.run("python", "-m", "tests.support.extras", extra)


# -- the lowest versions pyproject.toml allows ------------------------------------------------------------------

# Two installs: the in-process integrations (the OTel SDK at the otlp extra's bound), and the worker (its own,
# higher SDK bound); each with the part of the suite that needs nothing else.
LOWEST = {
    "inprocess": ("langchain,llamaindex,chroma,otlp", (
        "tests/test_records.py", "tests/test_auditor.py", "tests/test_chat_judge.py", "tests/test_tracing_spans.py",
        "tests/test_lexical_judge.py", "tests/test_metrics.py", "tests/test_failures_speak.py",
        "tests/test_first_run.py", "tests/test_langchain_handler.py", "tests/test_llamaindex_integration.py")),
    # The OTel SDK at the otlp extra's own bound (chromadb above pulls a newer one).
    "otlp": ("otlp", ("tests/test_tracing_spans.py", "tests/test_tracing_setup.py", "tests/test_records.py")),
    # The gRPC test sends with the OTel gRPC exporter, which no extra of ours installs.
    "worker": ("worker", ("tests/worker/test_receiver.py", "tests/worker/test_cli_worker.py", "-k", "not grpc")),
}


@nox.session(venv_backend="uv")
@nox.parametrize("part", tuple(LOWEST))
def lowest(session: nox.Session, part: str) -> None:
    """ragaudit's direct dependencies at their lowest allowed versions (``uv pip install --resolution
    lowest-direct``), then a subset of the suite that needs nothing else: the bounds are the ones tested."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parent
    extras, tests = LOWEST[part]
    session.install("--resolution", "lowest-direct", f"{root}[{extras}]")
    session.install("pytest>=8", "pytest-timeout>=2.2", "hypothesis>=6.100")
    versions = session.run("python", "-c", "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name']:"
                           " d.version for d in m.distributions()}, sort_keys=True))", silent=True)
    out = root / ".nox" / "user-install" / f"lowest-{part}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(str(versions).strip().splitlines()[-1], encoding="utf-8")
    session.log("lowest versions: " + ", ".join(f"{k}=={v}" for k, v in json.loads(out.read_text()).items()))
    session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not e2e and not slow", *tests,
                *session.posargs, env={"PYTHONPATH": str(root)})


# -- all of the above -------------------------------------------------------------------------------------------

@nox.session(python=False)
def user_install(session: nox.Session) -> None:
    """Every quick start, every extra, the lowest versions (what ``make user-install`` runs)."""
    for page in QUICK_STARTS:
        session.notify(f"quickstart(page='{page}')")
    for name in EXTRAS:
        session.notify(f"extra(extra='{name}')")
    for part in LOWEST:
        session.notify(f"lowest(part='{part}')")


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
    "1.55.3": ("openai==1.55.3",),
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
