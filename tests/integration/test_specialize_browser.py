"""The report page of an `inhabit specialize` run renders in `inhabit view`, driven in headless
Chromium (as tests/integration/test_viewer_browser.py; skipped without Debian's chromium).

The run folder is written by the report's own code (`report.build_report` over a state whose
steps hold the results the steps record), so the page is tested on the report as it is made.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from webdriver_client import Browser

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
SCREENS = Path(os.environ.get("INHABIT_SCREENSHOTS", ROOT / "bench" / "results" / "screens"))

pytestmark = pytest.mark.browser

if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip(
        "needs Debian's chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver)",
        allow_module_level=True,
    )


def _side(successes: list[int], turns: float) -> dict:
    recs = [{"task_id": f"t{i}", "success": bool(s)} for i, s in enumerate(successes)]
    n, c = len(recs), sum(successes)
    summary = {"tasks": n, "samples": n, "success_rate": c / n, "pass@1": c / n, "k": 1, "mean_turns": turns,
               "turns_per_solved": turns if c else None, "tokens_per_solved": 40.0 if c else None,
               "parse": {"turns": 3 * n, "parsed": 2 * n, "rate": 2 / 3}, "flags": {"tests_modified": 1},
               "causes": {}}  # fmt: skip
    summary["pass@1"] = c / n
    return {"summary": summary, "per_task": {r["task_id"]: float(r["success"]) for r in recs},
            "successes": c, "episodes": n}  # fmt: skip


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from inhabit.orchestrator.specialize.config import SpecializeConfig
    from inhabit.orchestrator.specialize.report import build_report
    from inhabit.orchestrator.specialize.state import RunState
    from inhabit.orchestrator.specialize.steps import Inputs

    run = tmp_path_factory.mktemp("spec") / "specialize-mylib"
    run.mkdir()
    state = RunState(run / "state.json")
    state.adopt({"repo": "r"}, resume=False)
    results = {
        "tasks": {"built": 20, "train": [f"x{i}" for i in range(12)], "held_out": [f"t{i}" for i in range(8)],
                  "modules": {"mylib/a.py": "train", "mylib/<b>.py": "held-out"}, "env_id": None},
        "baseline": _side([0, 0, 1, 0, 0, 0, 0, 0], 4.0),
        "bootstrap": {"ran": False},
        "rl": {"ran": True, "steps": 12, "flags": {}},
        "final": _side([1, 0, 0, 0, 0, 1, 0, 0], 3.0) | {"accepted": True, "tolerance": 0.1},
    }  # fmt: skip
    for name, res in results.items():
        state.start(name)
        state.finish(name, res)
    inp = Inputs(Path("/src/mylib"), Path("/models/m"), run, 7200.0, SpecializeConfig())
    report = build_report(inp, state, run)
    (run / "specialize.json").write_text(json.dumps(report))
    (run / "config.json").write_text(json.dumps({"specialize": {}}))
    return run


@pytest.fixture(scope="module")
def server(run_dir: Path) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "inhabit", "view", str(run_dir), "--port", str(port)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(url + "/", timeout=5).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(
                        "inhabit view did not start:\n" + (proc.stdout.read().decode() if proc.stdout else "")
                    )
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_specialize_report_page_renders(server: str, run_dir: Path) -> None:
    browser = Browser(CHROMIUM, CHROMEDRIVER)
    try:
        browser.get(server + "/run/specialize-mylib")
        browser.find("a[href='/run/specialize-mylib/specialize']").click()
        browser.wait(lambda d: d.current_url.endswith("/specialize"))
        rows = [r.text for r in browser.find_all("#before-after tr")]
        assert any(r.startswith("success 12.5% 25.0%") for r in rows), rows
        verdict = browser.find(".verdict").text
        assert verdict.startswith("NOT called better") and "holds 0" in verdict  # 8 tasks: too noisy
        assert "mylib/<b>.py" in browser.find("body").text  # the module's name is text, not markup
        commands = browser.find("#commands").text
        assert f"inhabit serve --model {run_dir / 'model'}" in commands and "inhabit agent --repo" in commands
        SCREENS.mkdir(parents=True, exist_ok=True)
        browser.screenshot(SCREENS / "specialize-report.png")
        assert browser.console_errors() == []
    finally:
        browser.quit()
