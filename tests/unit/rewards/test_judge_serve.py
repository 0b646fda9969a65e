"""A judge against inhabit's own `inhabit serve` running a tiny random model on 127.0.0.1: the wiring
works end to end, and the tiny model's (unparseable) answer is recorded as no score."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from inhabit.rewards.compose import Changes, RewardComposer, RewardConfig
from inhabit.rewards.judge import JudgeConfig

SRC = Path(__file__).resolve().parents[3] / "src"


@pytest.fixture
def served_tiny_model(tmp_path):
    from inhabit.models.tiny import build_tiny_model, save_model_folder
    from inhabit.models.tokenizer import default_tokenizer

    tok = default_tokenizer()
    folder = save_model_folder(build_tiny_model("dense-1m", vocab_size=len(tok), seed=0), tok, tmp_path / "m")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "inhabit", "serve", "--model", str(folder), "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(600):
            if proc.poll() is not None:
                pytest.fail(f"inhabit serve exited: {(tmp_path / 'serve.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            pytest.fail("inhabit serve did not come up in time")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.mark.slow
async def test_judge_on_inhabit_serve_records_no_score_for_babble(served_tiny_model):
    judge = JudgeConfig(
        name="style", base_url=served_tiny_model, max_tokens=24, retries=1, weight=1.0, timeout_s=120
    )
    composer = RewardComposer(RewardConfig(judges=[judge]))
    out = await composer.compose(
        tests=1.0,
        changes=Changes(before={"a.py": "x = 1\n"}, after={"a.py": "x = 2\n"}),
        instruction="set x to 2",
    )
    await composer.close()
    detail = out.details["judge_style"]
    if out.parts["judge_style"] is None:  # a random tiny model does not follow the format
        assert detail["attempts"] == 2  # both calls reached the model and got an answer back
        assert "unparseable" in detail["error"] and out.missing == ["judge_style"]
        assert out.reward == 1.0  # renormalized over the tests part
    else:
        assert 0.0 <= out.parts["judge_style"] <= 1.0
