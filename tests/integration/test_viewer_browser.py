"""`inhabit view` on the shipped recorded run, driven in headless Chromium (Debian's chromium and
chromium-driver, through the small WebDriver client in tests/webdriver_client.py; nothing is
downloaded at run time).

Each page must load without console errors; the episode table filters; an episode page shows its
diff; a live run's curve gains a point when a line is appended to its metrics.jsonl. A screenshot
of each page goes to $INHABIT_SCREENSHOTS, or bench/results/screens (ignored by git), where a CI
report can keep it.
"""

from __future__ import annotations

import json
import os
import shutil
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
EXAMPLE = ROOT / "examples" / "recorded-run"
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
SCREENS = Path(os.environ.get("INHABIT_SCREENSHOTS", ROOT / "bench" / "results" / "screens"))

pytestmark = pytest.mark.browser


if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip(
        "needs Debian's chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver): "
        "apt-get install -y chromium chromium-driver (`make test` does it when run as root)",
        allow_module_level=True,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def run_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped run, copied: the live-curve test appends to its metrics.jsonl."""
    dst = tmp_path_factory.mktemp("view") / "recorded-run"
    shutil.copytree(EXAMPLE, dst)
    return dst


@pytest.fixture(scope="module")
def server(run_copy: Path) -> Iterator[str]:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "inhabit", "view", str(run_copy), "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(url + "/", timeout=5).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    out = proc.stdout.read().decode() if proc.stdout else ""
                    pytest.fail(f"inhabit view did not start:\n{out}")
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    driver = Browser(CHROMIUM, CHROMEDRIVER)
    try:
        yield driver
    finally:
        driver.quit()


def _shot(driver: Browser, name: str) -> None:
    SCREENS.mkdir(parents=True, exist_ok=True)
    driver.screenshot(SCREENS / f"{name}.png")


def _first_diff_episode(run: Path) -> int:
    """An episode whose edits changed a file (it has a non-empty final diff)."""
    with (run / "trajectories.jsonl").open() as f:
        for n, line in enumerate(f):
            rec = json.loads(line)
            if any(c["tool"] == "edit_file" and not c["error"] and c["args"]["old"] != c["args"]["new"]
                   for c in rec["tool_calls"]):  # fmt: skip
                return n
    raise AssertionError("the recorded run has no episode with an edit")


def test_every_page_loads_without_console_errors(server: str, browser: Browser, run_copy: Path):
    pages = {
        "runs": "/",
        "run": "/run/recorded-run",
        "episodes": "/run/recorded-run/episodes",
        "episode": f"/run/recorded-run/episode/{_first_diff_episode(run_copy)}",
        "compare": "/compare?runs=recorded-run",
    }
    for name, path in pages.items():
        browser.get(server + path)
        if name in ("run", "compare"):  # curves are drawn once the first poll came back
            browser.wait(lambda d: d.find_all(".chart .main-svg"))
        _shot(browser, name)
        assert browser.console_errors() == [], name


def test_the_episode_table_filters(server: str, browser: Browser):
    browser.get(server + "/run/recorded-run/episodes")
    browser.find("#f-purpose option[value='train']").click()
    browser.find("#f-status option[value='finished']").click()
    browser.find("#f-reward_min").send_keys("0")
    browser.find("#f-apply").click()
    browser.wait(lambda d: "status=finished" in d.current_url)
    rows = browser.find_all("#episodes tbody tr")
    shown, _, total = browser.find("#count").text.split()[:3]  # "N of M episodes ..."
    assert 0 < int(shown) < int(total) and len(rows) == min(int(shown), 50)
    for row in rows:
        cells = [c.text for c in row.find_all("td")]
        assert cells[2] == "train" and cells[3] == "finished" and float(cells[4]) >= 0.0
    _shot(browser, "episodes-filtered")
    assert browser.console_errors() == []


def test_an_episode_page_shows_its_diff(server: str, browser: Browser, run_copy: Path):
    browser.get(server + f"/run/recorded-run/episode/{_first_diff_episode(run_copy)}")
    diff = browser.find("#diff")
    assert "--- a/" in diff.text and "+++ b/" in diff.text
    assert diff.find_all(".hl .gd") and diff.find_all(".hl .gi")  # highlighted removed and added lines
    assert browser.find_all("pre.model span[title^='logprob']"), "token logprobs on hover"


def test_a_live_curve_gains_a_point(server: str, browser: Browser, run_copy: Path):
    browser.get(server + "/run/recorded-run")
    chart = "div.chart[data-title='Reward']"
    before = int(browser.wait(lambda d: d.find(chart).attribute("data-points")))
    last = [json.loads(x) for x in (run_copy / "metrics.jsonl").read_text().splitlines()][-1]
    with (run_copy / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": int(last["step"]) + 1, "reward": {"mean": 0.5}}) + "\n")
    browser.wait(lambda d: int(d.find(chart).attribute("data-points")) == before + 1)
    _shot(browser, "run-live")
    assert browser.console_errors() == []
