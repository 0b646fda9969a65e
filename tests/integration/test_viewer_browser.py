"""`inhabit view` on the shipped recorded run, driven in headless Chromium (Debian's chromium and
chromium-driver, through selenium; nothing is downloaded at run time).

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

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "recorded-run"
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
SCREENS = Path(os.environ.get("INHABIT_SCREENSHOTS", ROOT / "bench" / "results" / "screens"))

pytestmark = pytest.mark.browser


def _skip_reason() -> str | None:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        return (
            "needs Debian's chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver): "
            "apt-get install -y chromium chromium-driver (scripts/setup.sh does it when run as root)"
        )
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "needs selenium (pip install -e '.[dev]')"
    return None


if (_reason := _skip_reason()) is not None:
    pytest.skip(_reason, allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


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
def browser() -> Iterator[webdriver.Chrome]:
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()


def _errors(driver: webdriver.Chrome) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def _shot(driver: webdriver.Chrome, name: str) -> None:
    SCREENS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SCREENS / f"{name}.png"))


def _wait(driver: webdriver.Chrome, cond, timeout: float = 60):  # type: ignore[no-untyped-def]
    return WebDriverWait(driver, timeout, poll_frequency=0.2).until(cond)


def _first_diff_episode(run: Path) -> int:
    """An episode whose edits changed a file (it has a non-empty final diff)."""
    with (run / "trajectories.jsonl").open() as f:
        for n, line in enumerate(f):
            rec = json.loads(line)
            if any(c["tool"] == "edit_file" and not c["error"] and c["args"]["old"] != c["args"]["new"]
                   for c in rec["tool_calls"]):  # fmt: skip
                return n
    raise AssertionError("the recorded run has no episode with an edit")


def test_every_page_loads_without_console_errors(server: str, browser: webdriver.Chrome, run_copy: Path):
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
            _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".chart .main-svg"))
        _shot(browser, name)
        assert _errors(browser) == [], name


def test_the_episode_table_filters(server: str, browser: webdriver.Chrome):
    browser.get(server + "/run/recorded-run/episodes")
    Select(browser.find_element(By.ID, "f-purpose")).select_by_value("train")
    Select(browser.find_element(By.ID, "f-status")).select_by_value("finished")
    browser.find_element(By.ID, "f-reward_min").send_keys("0")
    browser.find_element(By.ID, "f-apply").click()
    _wait(browser, lambda d: "status=finished" in d.current_url)
    rows = browser.find_elements(By.CSS_SELECTOR, "#episodes tbody tr")
    shown, _, total = browser.find_element(By.ID, "count").text.split()[:3]  # "N of M episodes ..."
    assert 0 < int(shown) < int(total) and len(rows) == min(int(shown), 50)
    for row in rows:
        cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
        assert cells[2] == "train" and cells[3] == "finished" and float(cells[4]) >= 0.0
    _shot(browser, "episodes-filtered")
    assert _errors(browser) == []


def test_an_episode_page_shows_its_diff(server: str, browser: webdriver.Chrome, run_copy: Path):
    browser.get(server + f"/run/recorded-run/episode/{_first_diff_episode(run_copy)}")
    diff = browser.find_element(By.ID, "diff")
    assert "--- a/" in diff.text and "+++ b/" in diff.text
    assert diff.find_elements(By.CSS_SELECTOR, ".hl .gd") and diff.find_elements(By.CSS_SELECTOR, ".hl .gi")
    tokens = browser.find_elements(By.CSS_SELECTOR, "pre.model span[title^='logprob']")
    assert tokens, "token logprobs on hover"


def test_a_live_curve_gains_a_point(server: str, browser: webdriver.Chrome, run_copy: Path):
    browser.get(server + "/run/recorded-run")
    chart = "div.chart[data-title='Reward']"
    before = int(
        _wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, chart).get_attribute("data-points"))
    )
    last = [json.loads(x) for x in (run_copy / "metrics.jsonl").read_text().splitlines()][-1]
    with (run_copy / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": int(last["step"]) + 1, "reward": {"mean": 0.5}}) + "\n")
    _wait(
        browser,
        lambda d: int(d.find_element(By.CSS_SELECTOR, chart).get_attribute("data-points")) == before + 1,
    )
    _shot(browser, "run-live")
    assert _errors(browser) == []
