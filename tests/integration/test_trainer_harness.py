"""Real harness episodes -> trajectory records -> samples -> a train step, end to end in-process.

A tiny random MoE model served by the EmbeddedEngine plays the agent through the real harness loop
in a real (process-backend) sandbox. Its turns are gibberish, which makes it a good adversary for
the re-tokenization trap: decoded random tokens rarely re-encode to the same ids, so many turns
cannot share a sequence. The test checks that every generated token lands in exactly one sample,
after exactly the context the engine conditioned it on, with the engine's logprob; and that the
trainer, with the engine's weights, reproduces the engine's logprobs and routes (replay on).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

import pytest
import torch

from inhabit.contracts import Message, Policy, PolicyTurn
from inhabit.harness.config import HarnessConfig
from inhabit.harness.loop import run_episode
from inhabit.sandbox import SandboxConfig, create_provider
from inhabit.trainer.config import TrainerConfig
from inhabit.trainer.samples import group_samples
from inhabit.trainer.trainer import Trainer

# Twelve samples of ~1k tokens each (the system prompt) through an MoE forward+backward: slow.
pytestmark = pytest.mark.slow

G = 4


class EnginePolicy(Policy):
    """The smallest engine-backed policy: render with the chat template, generate, report tokens."""

    def __init__(self, engine, tokenizer, seed: int) -> None:
        self.engine, self.tok, self.seed, self.calls = engine, tokenizer, seed, 0
        self.context_window = 2048

    def count_tokens(self, messages: Sequence[Message]) -> int:
        from inhabit.models.tokenizer import encode_chat

        return len(encode_chat(self.tok, messages))

    async def next_turn(
        self, messages: Sequence[Message], *, max_tokens: int, stop: Sequence[str] = ()
    ) -> PolicyTurn:
        from inhabit.inference.engine import GenerationRequest, SamplingParams
        from inhabit.models.tokenizer import encode_chat

        ids = encode_chat(self.tok, messages)
        self.calls += 1
        params = SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=self.seed * 1000 + self.calls)
        (c,) = await self.engine.generate([GenerationRequest(ids, params)])
        return PolicyTurn(
            text=c.text,
            finish_reason=c.finish_reason,
            prompt_token_ids=ids,
            completion_token_ids=c.token_ids,
            logprobs=c.logprobs,
            routed_experts=c.routed_experts,
            versions=c.versions,
            prompt_tokens=len(ids),
            completion_tokens=len(c.token_ids),
        )


@pytest.fixture(scope="module")
def rollouts(tmp_path_factory):
    from inhabit.inference.config import EngineConfig
    from inhabit.inference.embedded import EmbeddedEngine
    from inhabit.models.tiny import build_tiny_model
    from inhabit.models.tokenizer import default_tokenizer

    tmp = tmp_path_factory.mktemp("trainer-harness")
    tok = default_tokenizer(cache_dir=tmp / "cache")
    repo = tmp / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    cfg = HarnessConfig(max_turns=3, max_turn_tokens=24, test_command=f"{sys.executable} -c pass")

    async def run() -> list:
        engine = EmbeddedEngine(
            build_tiny_model("moe-2m", vocab_size=len(tok), seed=0), tok, EngineConfig(seed=0)
        )
        provider = create_provider(SandboxConfig(backend="process"))
        try:
            trajs = []
            for i in range(G):
                sandbox = await provider.create(repo)
                try:
                    traj = await run_episode(
                        EnginePolicy(engine, tok, seed=i), sandbox, "Fix add.", config=cfg, task_id="calc"
                    )
                finally:
                    await sandbox.close()
                trajs.append(traj.model_copy(update={"reward": float(i % 2)}))
            return trajs
        finally:
            await provider.close()
            await engine.close()

    return tok, asyncio.run(run())


def _find(haystack: list[int], needle: list[int]) -> bool:
    return len(haystack) >= len(needle) and haystack[: len(needle)] == needle


def test_every_generated_token_lands_once_after_its_own_context(rollouts) -> None:
    _, trajs = rollouts
    assert all(t.status in ("finished", "turn_limit") for t in trajs), [(t.status, t.error) for t in trajs]
    samples = group_samples(trajs, group_id="calc")
    turns = [turn for t in trajs for seg in t.segments for turn in seg.turns]
    assert sum(s.num_loss_tokens for s in samples) == sum(len(t.completion_token_ids) for t in turns)
    for turn in turns:
        prompt, comp = turn.prompt_token_ids, turn.completion_token_ids
        hits = [s for s in samples if _find(s.input_ids.tolist(), prompt + comp)]
        assert hits, "a turn's prompt + completion must be a prefix of some sample"
        s = hits[0]
        p = len(prompt)
        assert s.loss_mask[p : p + len(comp)].all()
        torch.testing.assert_close(s.behaviour_logprobs[p : p + len(comp)], torch.tensor(turn.logprobs))
    merged = sum(s.meta["turns"] > 1 for s in samples)
    print(f"{len(turns)} turns -> {len(samples)} samples ({merged} merged)")


def test_trainer_reproduces_the_engine_on_real_trajectories(rollouts) -> None:
    from inhabit.models.tiny import build_tiny_model

    tok, trajs = rollouts
    samples = group_samples(trajs, group_id="calc")
    trainer = Trainer(build_tiny_model("moe-2m", vocab_size=len(tok), seed=0), TrainerConfig(lr=1e-4))
    m = trainer.train_step(samples)
    assert m.fresh_tokens == m.loss_tokens > 0
    # Same fp32 weights; prompt positions route freely (TurnRecord has no prompt routes), so the
    # figures are at rounding level rather than exactly 0.
    assert m.mismatch_mean_abs < 1e-3 and m.mismatch_kl_k3 < 1e-5
    assert m.routing_disagreement == 0.0
    assert m.version == 1 and m.grad_norm > 0
