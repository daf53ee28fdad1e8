"""Take the docs site's screenshots from the real programs: ``make docs-screenshots``.

    python scripts/docs_screenshots.py [--out docs/images] [--skip-phoenix]

1. ``report.png``: the demo's eight answers and their careless twins (``ragaudit demo`` and
   ``ragaudit demo --careless``, offline), rendered by ``ragaudit report --html`` and photographed by
   headless Chromium.
2. ``phoenix-trace.png``: the same answers sent to a real Phoenix server (``.venv-phoenix``, made by
   ``make test``) with ``examples/send_traces.py phoenix``, and Phoenix's own page for a judged trace.

Nothing is drawn by hand: a picture that no longer matches the programs is retaken by running this
again. Needs Debian's ``chromium``; prints each file it writes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WINDOW = "1400,1000"


def chromium() -> str:
    for name in (os.environ.get("RAGAUDIT_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return str(shutil.which(name))
    raise SystemExit("headless Chromium is needed: apt-get install -y chromium (or set RAGAUDIT_CHROMIUM)")


def screenshot(url: str, out: Path, work: Path, wait_ms: int = 4000) -> Path:
    """Photograph *url* with headless Chromium into *out* (PNG)."""
    profile = work / f"chromium-{out.stem}"
    argv = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--disable-background-networking", "--no-first-run", f"--user-data-dir={profile}",
            f"--window-size={WINDOW}", f"--virtual-time-budget={wait_ms}", f"--screenshot={out}", url]
    subprocess.run(argv, check=True, capture_output=True, timeout=180)
    if not out.exists() or out.stat().st_size < 10_000:
        raise SystemExit(f"Chromium wrote no usable screenshot of {url}")
    print(f"wrote {out} ({out.stat().st_size // 1024} KiB)")
    return out


def _ragaudit(*argv: str, cwd: Path, env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-m", "ragaudit.cli", *argv], cwd=cwd, env=env, check=True,
                   stdout=subprocess.DEVNULL, timeout=600)


def offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "OTEL_", "RAGAUDIT_", "PHOENIX_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)
    return env


def report_picture(out_dir: Path, work: Path) -> Path:
    env = offline_env()
    _ragaudit("demo", cwd=work, env=env)
    _ragaudit("demo", "--careless", cwd=work, env=env)
    _ragaudit("report", "--html", "report.html", cwd=work, env=env)
    return screenshot((work / "report.html").as_uri(), out_dir / "report.png", work)


def _graphql(base_url: str, query: str) -> dict:
    request = urllib.request.Request(base_url + "/graphql", data=json.dumps({"query": query}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())["data"]


def phoenix_picture(out_dir: Path, work: Path) -> Path:
    from tests.support.phoenix import start_phoenix

    server = start_phoenix(work)
    try:
        env = offline_env() | {"PHOENIX_COLLECTOR_ENDPOINT": server.base_url}
        subprocess.run([sys.executable, str(ROOT / "examples" / "send_traces.py"), "phoenix"], cwd=work, env=env,
                       check=True, stdout=subprocess.DEVNULL, timeout=600)
        spans = server.wait_for_spans("default", lambda s: any(x["name"] == "ragaudit.judge" for x in s), 60)
        judge = next(s for s in spans if s["name"] == "ragaudit.judge")
        trace_id = judge["context"]["trace_id"]
        projects = _graphql(server.base_url, "{ projects { edges { node { id name } } } }")["projects"]["edges"]
        project = next(p["node"]["id"] for p in projects if p["node"]["name"] == "default")
        time.sleep(1.0)  # annotations land shortly after the spans
        return screenshot(f"{server.base_url}/projects/{project}/traces/{trace_id}", out_dir / "phoenix-trace.png",
                          work, wait_ms=15000)
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    parser.add_argument("--skip-phoenix", action="store_true", help="only the HTML report (no Phoenix server)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ragaudit-shots-") as tmp:
        work = Path(tmp)
        report_picture(args.out, work)
        if not args.skip_phoenix:
            phoenix_picture(args.out, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
