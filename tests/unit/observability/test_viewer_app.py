"""The viewer's pages over a small run folder: escaping, confinement, token, filters, live metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from inhabit.grading import hacks
from inhabit.observability.viewer.app import create_app
from inhabit.observability.viewer.episode import flag_explanations
from viewer_fixtures import make_trajectory, write_run


@pytest.fixture
def client(run_dir: Path) -> TestClient:
    return TestClient(create_app([run_dir]))


def test_every_page_renders(client: TestClient):
    for url in ("/", "/run/run-a", "/run/run-a/episodes", "/run/run-a/episode/0", "/compare?runs=run-a"):
        r = client.get(url)
        assert r.status_code == 200, url
        assert "<html" in r.text
    assert "run-a" in client.get("/").text
    assert "25.0%" in client.get("/run/run-a").text  # eval.json's success rate


def test_model_output_and_observations_render_as_text(tmp_path: Path):
    evil = "<script>alert('x')</script>"
    t = make_trajectory(0, text=f"I will {evil}")
    t = t.model_copy(
        update={"tool_calls": [c.model_copy(update={"observation": evil}) for c in t.tool_calls]}
    )
    run = write_run(tmp_path / "evil", [t])
    page = TestClient(create_app([run])).get("/run/evil/episode/0").text
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(" in page


def test_episode_page_shows_the_final_diff_tests_flags_and_logprobs(tmp_path: Path):
    run = write_run(tmp_path / "r", [make_trajectory(0, flags=("code_uses_pytest",)), make_trajectory(1)])
    c = TestClient(create_app([run]))
    page = c.get("/run/r/episode/0").text
    diff = page.split('id="diff"', 1)[1].split("<h2>", 1)[0]
    assert "a/calc.py" in diff and "return a + b" in diff and "return a - b" in diff
    assert "tests/test_calc.py::test_add" in page
    assert "code_uses_pytest" in page and "fatal" in page and "imports or calls pytest" in page
    assert 'title="logprob -2.000' in page
    assert 'class="calls parallel"' in page  # read_file and list_dir in one turn
    failed = c.get("/run/r/episode/1").text
    assert "assert 3 == 5" in failed


def test_every_hack_flag_has_an_explanation():
    expl = flag_explanations()
    assert set(expl) == set(hacks.ALL_FLAGS)
    assert "pytest.exit" in expl["early_exit"]  # continuation lines are joined


def test_paths_stay_inside_the_run_folders(tmp_path: Path, run_dir: Path, client: TestClient):
    (tmp_path / "secret.txt").write_text("TOP SECRET")
    for url in (
        "/static/../../../../etc/passwd",
        "/static/%2e%2e%2fapp.py",
        "/static/..%2F..%2Fsecret.txt",
        "/run/..%2F..%2Fsecret.txt",
        "/run/../secret.txt",
        "/run/run-a/episode/-1",
        "/run/run-a/episode/999",
        "/api/run/..%2Fsecret/metrics",
        "/static/app.py",
    ):
        r = client.get(url)
        assert r.status_code in (404, 422), url
        assert "TOP SECRET" not in r.text
    # A task id from the data cannot point the diff outside the task cache.
    (tmp_path / "outside" / "workspace").mkdir(parents=True)
    (tmp_path / "outside" / "workspace" / "calc.py").write_text("OUTSIDE\n")
    bad = make_trajectory(0, task_id="../../../outside")
    run = write_run(tmp_path / "r2", [bad])
    page = TestClient(create_app([run])).get("/run/r2/episode/0").text
    assert "OUTSIDE" not in page
    assert "each edit on its own" in page


def test_episode_table_filters_sorts_and_pages(client: TestClient):
    page = client.get("/run/run-a/episodes", params={"status": "turn_limit"}).text
    rows = page.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    assert rows.count("<tr") == 3  # episodes 0, 5, 10
    assert "3 of 12 episodes" in page
    page = client.get("/run/run-a/episodes", params={"reward_min": "1", "purpose": "train"}).text
    assert "3 of 12 episodes" in page  # won (even i) and a train rollout (i % 4 != 0): 2, 6, 10
    assert client.get("/run/run-a/episodes", params={"reward_min": "x"}).status_code == 400
    page = client.get("/run/run-a/episodes", params={"sort": "reward", "desc": "1"}).text
    body = page.split("<tbody>", 1)[1]
    assert body.index("1.00") < body.index("0.00")


def test_metrics_endpoint_returns_only_what_was_appended(run_dir: Path, client: TestClient):
    first = client.get("/api/run/run-a/metrics", params={"offset": 0}).json()
    assert [p["step"] for p in first["points"]] == [1, 2, 3]
    assert first["points"][0]["reward.mean"] == pytest.approx(0.1)
    again = client.get("/api/run/run-a/metrics", params={"offset": first["offset"]}).json()
    assert again["points"] == []
    with (run_dir / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 4, "reward": {"mean": 0.9}}) + "\n" + '{"step": 5, "rew')
    more = client.get("/api/run/run-a/metrics", params={"offset": first["offset"]}).json()
    assert [p["step"] for p in more["points"]] == [4]  # the half-written line waits


def test_a_token_is_required_when_set(run_dir: Path):
    c = TestClient(create_app([run_dir], token="s3cret-token"))
    assert c.get("/").status_code == 401
    assert c.get("/static/viewer.css").status_code == 401
    assert c.get("/", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200
    r = c.get("/run/run-a?token=s3cret-token", follow_redirects=False)
    assert r.status_code == 303 and "token" not in r.headers["location"]
    assert c.get("/run/run-a").status_code == 200  # the cookie it set


def test_a_folder_of_runs_lists_each_run(tmp_path: Path):
    write_run(tmp_path / "runs" / "a", [make_trajectory(0)])
    write_run(tmp_path / "runs" / "b", [make_trajectory(1)])
    page = TestClient(create_app([tmp_path / "runs"])).get("/").text
    assert 'href="/run/a"' in page and 'href="/run/b"' in page
