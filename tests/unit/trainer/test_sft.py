"""Supervised samples from chats (assistant turns masked in) and the SFT step (the bootstrap stage)."""

from __future__ import annotations

import pytest

from inhabit.trainer.config import TrainerConfig
from inhabit.trainer.samples import chat_sample, sft_samples
from inhabit.trainer.trainer import Trainer
from inhabit.types import MessageRecord, Segment, Trajectory

CHAT = [
    MessageRecord(role="system", content="You fix bugs."),
    MessageRecord(role="user", content="Task:\nFix add."),
    MessageRecord(role="assistant", content='<tool name="read_file"><path>calc.py</path></tool>'),
    MessageRecord(role="user", content="1\tdef add(a, b):\n2\t    return a - b"),
    MessageRecord(role="assistant", content='<tool name="finish"><message>done</message></tool>'),
]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from inhabit.models.tokenizer import default_tokenizer

    return default_tokenizer(cache_dir=tmp_path_factory.mktemp("cache"))


def test_chat_sample_masks_exactly_the_assistant_turns(tok) -> None:
    from inhabit.models.tokenizer import encode_chat

    s = chat_sample(tok, CHAT)
    assert s.input_ids.tolist() == encode_chat(tok, CHAT, add_generation_prompt=False)
    ids, mask = s.input_ids.tolist(), s.loss_mask.tolist()
    spans, cur = [], []
    for t, m in zip(ids, mask, strict=True):
        if m:
            cur.append(t)
        elif cur:
            spans.append(cur)
            cur = []
    if cur:
        spans.append(cur)
    assert [tok.decode(sp) for sp in spans] == [CHAT[2].content + "<|end|>", CHAT[4].content + "<|end|>"]
    # the token before each span is the assistant role marker, supplied by the prompt
    starts = [i for i in range(1, len(mask)) if mask[i] and not mask[i - 1]]
    assert all(ids[i - 1] == tok.convert_tokens_to_ids("<|assistant|>") for i in starts)


def test_sft_samples_one_per_segment_with_an_assistant_message(tok) -> None:
    traj = Trajectory(
        task_id="t",
        instruction="",
        status="finished",
        segments=[Segment(index=0, messages=CHAT, turns=[]), Segment(index=1, messages=CHAT[:2], turns=[])],
    )
    assert len(sft_samples(traj, tok)) == 1


def test_sft_steps_lower_the_nll_whatever_the_rl_temperature(tok) -> None:
    from inhabit.models.tiny import build_tiny_model

    sample = chat_sample(tok, CHAT)
    losses = {}
    for temp, steps in ((1.0, 4), (0.5, 1)):
        trainer = Trainer(
            build_tiny_model("dense-1m", vocab_size=len(tok), seed=0),
            TrainerConfig(lr=3e-3, temperature=temp),
        )
        losses[temp] = [trainer.sft_step([sample]).loss for _ in range(steps)]
        assert trainer.version == steps
    assert losses[1.0][0] == pytest.approx(losses[0.5][0]), "SFT scores at temperature 1"
    assert losses[1.0][-1] < 0.8 * losses[1.0][0], losses


def test_sft_measure_reports_the_step_loss_without_updating() -> None:
    import torch

    from inhabit.trainer.lm_data import lm_sample

    from .conftest import build

    samples = [lm_sample(list(range(1 + i, 40 + i))) for i in range(3)]
    trainer = Trainer(build("dense-1m"), TrainerConfig(lr=1e-2, micro_batch_tokens=64))
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    measured = trainer.sft_measure(samples)
    assert trainer.version == 0 and trainer.steps == 0 and measured.grad_norm == 0.0
    assert all(torch.equal(v, before[k]) for k, v in trainer.model.state_dict().items())
    stepped = trainer.sft_step(samples)  # same forward, then an update: the same NLL
    assert stepped.loss == pytest.approx(measured.loss, rel=1e-6) and trainer.version == 1
    assert trainer.sft_measure(samples).loss < measured.loss
