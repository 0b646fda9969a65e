"""Bootstrap ("mid-training"): next-token training of a tiny model on the expert's transcripts.

Each transcript's last context is rendered with the model's chat template exactly as the policy
renders it at rollout time (`encode_chat`, message by message); the loss covers only the
assistant turns (their text and the closing `<|end|>` the engine stops on), never the system
prompt, task or observations. Training stops after a fixed number of optimizer steps: the
quickstart stops it on purpose while the model is only partly competent, so that RL has room to
show what it adds.

The quickstart tokenizer is the project's default BPE plus one added (non-special) token holding
the harness's system prompt, which never changes: the model sees exactly the same text, but it
costs one position instead of ~1,200, which is what makes CPU training of the quickstart fit in
minutes. Decoding is unchanged (the token decodes to the prompt's text).

The native quickstart (`tokenizer = "quickstart-native"`, `harness.tool_format = "native"`) uses the
same BPE with `NATIVE_CHAT_TEMPLATE` (a Qwen3-style tools block, `<tool_call>` JSON,
`<tool_response>` turns), and the one added token holds its whole system turn: the native
instructions plus the tools block the template renders from `prompts.tool_schemas()` (~2,100
tokens otherwise, more than the quickstart model's context). The expert's transcripts then run
through the harness in the native format and are rendered by that template (`trainer.samples.
chat_sample`, as SFT renders native transcripts), so the bootstrap teaches the `<tool_call>` format.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from inhabit.types import Trajectory


def quickstart_tokenizer(vocab_size: int = 4096, seed: int = 0) -> Any:
    """The default tokenizer plus the harness system prompt as one added token."""
    from tokenizers import AddedToken

    from inhabit.harness.prompts import system_prompt
    from inhabit.models.tokenizer import default_tokenizer

    tok = default_tokenizer(vocab_size=vocab_size, seed=seed)
    tok.add_tokens([AddedToken(system_prompt(), special=False, normalized=False)])
    return tok


def native_system_text(tokenizer: Any) -> str:
    """The native system turn's text (instructions + tools block), as the template renders it."""
    from inhabit.harness.prompts import NATIVE_SYSTEM, tool_schemas
    from inhabit.models.tokenizer import render_chat

    text = render_chat(
        tokenizer, [{"role": "system", "content": NATIVE_SYSTEM}], add_generation_prompt=False,
        tools=tool_schemas(),
    )  # fmt: skip
    start, end = text.index("<|system|>") + len("<|system|>"), text.rindex("<|end|>")
    return text[start:end]


def quickstart_native_tokenizer(vocab_size: int = 4096, seed: int = 0) -> Any:
    """The default tokenizer with the native chat template, plus its system turn as one added token."""
    from tokenizers import AddedToken

    from inhabit.models.tokenizer import NATIVE_CHAT_TEMPLATE, default_tokenizer

    tok = default_tokenizer(vocab_size=vocab_size, seed=seed)
    tok.chat_template = NATIVE_CHAT_TEMPLATE
    tok.add_tokens([AddedToken(native_system_text(tok), special=False, normalized=False)])
    return tok


def transcript_example(tokenizer: Any, traj: Trajectory) -> tuple[list[int], list[bool]]:
    """(ids, loss_mask) of the trajectory's last context, loss on assistant tokens only."""

    if traj.tool_format == "native":  # rendered by the model's template with the harness's tools
        from inhabit.trainer.samples import sft_samples

        sample = sft_samples(traj, tokenizer)[-1]
        return sample.input_ids.tolist(), sample.loss_mask.tolist()

    return _messages_example(tokenizer, traj.segments[-1].messages)


def transcript_examples(tokenizer: Any, traj: Trajectory) -> list[tuple[list[int], list[bool]]]:
    """(ids, loss_mask) examples of an xml-format trajectory, every generation of it trained once in
    the context it was made in: one per context segment, the summary request and the summary
    closing it included. Where the harness had to drop a segment's oldest turns so that the summary
    request fit the window, the segment's record holds only what the summary saw; its action turns
    then get an example of their own, the context they were taken in rebuilt from the trajectory's
    calls and observations, and the recorded request trains only the summary."""
    return [_messages_example(tokenizer, msgs, learn_from) for msgs, learn_from in transcript_contexts(traj)]


def transcript_contexts(traj: Trajectory) -> list[tuple[list[Any], int]]:
    """(messages, learn_from) of each example `transcript_examples` encodes: the loss covers the
    assistant messages from index `learn_from` on."""
    assert traj.tool_format != "native", "the multistep bootstrap renders the xml format"
    out: list[tuple[list[Any], int]] = []
    before = 0  # action turns of the earlier segments (tool call records number turns episode-wide)
    for s in traj.segments:
        actions = [t for t in s.turns if t.kind == "action"]
        kept = sum(m.role == "assistant" for m in s.messages) - (s.summary is not None)
        if s.summary is not None and kept < len(actions):
            out.append((action_context(traj, s, before), 0))
            out.append((list(s.messages), len(s.messages) - 1))
        elif any(m.role == "assistant" for m in s.messages):
            out.append((list(s.messages), 0))
        before += len(actions)
    return out


class RenamedExamples:
    """Examples of multistep transcripts whose names are drawn afresh at each draw
    (`model.bootstrap.rename`, `renaming`): with probability `share` a drawn example is its
    transcript's context under made-up package, module and function names (drawn for that one
    example, consistent through it), otherwise as recorded. A renamed context longer than `window`
    tokens is trained as recorded."""

    def __init__(self, tokenizer: Any, trajs: Sequence[Trajectory], share: float, window: int) -> None:
        from inhabit.orchestrator.quickstart.renaming import NameDrawer, names_in, transcript_words

        self.tokenizer, self.share, self.window = tokenizer, share, window
        self.contexts: list[tuple[list[Any], int, list[str], set[str]]] = []
        for traj in trajs:
            ctxs = transcript_contexts(traj)
            every = [m for msgs, _ in ctxs for m in msgs]
            names, words = names_in(every), transcript_words(every)
            self.contexts += [(msgs, learn_from, names, words) for msgs, learn_from in ctxs]
        self.examples = [_messages_example(tokenizer, msgs, lf) for msgs, lf, _, _ in self.contexts]
        self.drawer = NameDrawer(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))))
        self.renamed = self.kept = 0

    def __len__(self) -> int:
        return len(self.examples)

    def draw(self, index: int, rng: random.Random) -> tuple[list[int], list[bool]]:
        from inhabit.orchestrator.quickstart.renaming import renamed

        msgs, learn_from, names, words = self.contexts[index]
        if not names or rng.random() >= self.share:
            return self.examples[index]
        ids, mask = _messages_example(
            self.tokenizer, renamed(msgs, self.drawer.draw(names, rng, words)), learn_from
        )
        if len(ids) > self.window:
            self.kept += 1
            return self.examples[index]
        self.renamed += 1
        return ids, mask


def bootstrap_extras(
    tokenizer: Any, trajs: Sequence[Trajectory], bootstrap: Any, window: int, seed: int
) -> tuple[RenamedExamples | None, Any]:
    """(draws, mix): what `model.bootstrap` (a `BootstrapConfig`) adds to its transcripts' examples,
    each None while off: renamed draws of them (`rename`) and copy-drill rows in every step
    (`drill_mix`, a `copydrill.DrillMix` seeded by `seed`). `prepare` and the SFT arm of
    bench/learning.py both build them here, so that the SFT baseline trains on what the bootstrap saw."""
    draws = RenamedExamples(tokenizer, trajs, bootstrap.rename, window) if bootstrap.rename else None
    mix = None
    if bootstrap.drill_mix:  # drill rows in every step, so the copying the drill taught is kept
        from inhabit.orchestrator.quickstart.copydrill import DrillMix

        mix = DrillMix(tokenizer, bootstrap.drill_mix, seed)
    return draws, mix


def action_context(traj: Trajectory, segment: Any, before: int, turns: int | None = None) -> list[Any]:
    """A segment's context up to its last action turn (or its first `turns` ones), as the harness
    rendered it (`harness.loop`): its first two messages (system prompt; task and earlier summary),
    then each action turn's text and its calls' observations (none after the last turn: nothing
    was generated after them). `before`: action turns of the earlier segments."""
    from inhabit.harness.prompts import render_observations
    from inhabit.types import MessageRecord

    messages = list(segment.messages[:2])
    actions = [t for t in segment.turns if t.kind == "action"][:turns]
    for k, turn in enumerate(actions):
        messages.append(MessageRecord(role="assistant", content=turn.text))
        calls = sorted((c for c in traj.tool_calls if c.turn == before + k), key=lambda c: c.index)
        if any(c.tool == "finish" and not c.error for c in calls):
            break
        if k == len(actions) - 1:  # the last turn's observations: nothing was generated after them
            break
        messages.append(MessageRecord(role="user", content=render_observations(calls)))
    return messages


def _messages_example(
    tokenizer: Any, messages: Sequence[Any], learn_from: int = 0
) -> tuple[list[int], list[bool]]:
    """Loss on the assistant messages from index `learn_from` on."""
    from inhabit.models.tokenizer import encode_chat

    ids: list[int] = []
    mask: list[bool] = []
    for k in range(1, len(messages) + 1):
        full = encode_chat(tokenizer, messages[:k], add_generation_prompt=False)
        assert full[: len(ids)] == ids, "per-message encoding must extend the previous prefix"
        new = full[len(ids) :]
        # new = [role marker, content..., <|end|>]; the role marker is prompt (the engine is given it).
        learn = messages[k - 1].role == "assistant" and k - 1 >= learn_from
        mask += [False] + [learn] * (len(new) - 1)
        ids = full
    return ids, mask


def train_bootstrap(
    model: Any,
    examples: Sequence[tuple[list[int], list[bool]]],
    *,
    steps: int,
    batch_size: int = 8,
    lr: float = 3e-3,
    warmup: int = 20,
    seed: int = 0,
    pad_id: int = 0,
    on_step: Callable[[int, float], None] | None = None,
    time_budget_s: float | None = None,
    draw: Callable[[int, random.Random], tuple[list[int], list[bool]]] | None = None,
    aux_loss: Callable[[Any], torch.Tensor] | None = None,
    bf16: bool = False,
    micro_batch_tokens: int | None = None,
) -> list[float]:
    """`steps` AdamW updates of masked next-token loss (fewer when `time_budget_s` of wall clock runs
    out first: the equal-compute SFT baseline of bench/learning.py); returns the loss per step.
    With `draw`, example `i` of a batch is `draw(i, rng)` (`RenamedExamples.draw`) instead of
    `examples[i]`. With `aux_loss`, `aux_loss(model)` is added to every step's loss
    (`copydrill.DrillMix.loss`); the losses returned are the transcripts' alone. With `bf16`, the
    forward runs under bf16 autocast (the trainer's `precision = "bf16-mixed"`: fp32 master weights
    and optimizer, bf16 matmuls), which is what makes a real model's bootstrap affordable on a CPU
    with native bf16. With `micro_batch_tokens`, a batch's rows run in groups of at most that many
    padded tokens with their gradients accumulated (the same update); either way the vocabulary
    projection runs on the supervised positions only (`_supervised_logits`), so a 49k-word
    vocabulary over a long transcript costs its assistant turns' logits, not every token's."""
    rng = random.Random(seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))

    def lr_at(step: int) -> float:  # warm-up, then cosine to 10%
        if step < warmup:
            return lr * (step + 1) / warmup
        frac = (step - warmup) / max(1, steps - warmup)
        return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    device = next(model.parameters()).device.type
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=bf16)
    order: list[int] = []
    losses = []
    t0 = time.monotonic()
    for step in range(steps):
        if time_budget_s is not None and time.monotonic() - t0 >= time_budget_s:
            break
        if len(order) < batch_size:
            more = list(range(len(examples)))
            rng.shuffle(more)
            order += more
        picked = [order.pop() for _ in range(batch_size)]
        batch = [draw(i, rng) if draw is not None else examples[i] for i in picked]
        supervised = max(1, sum(sum(mask[1:]) for _, mask in batch))
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for group in _row_groups(batch, micro_batch_tokens):
            inp, att, tgt = _padded(group, pad_id)
            with autocast:
                logits, targets = _supervised_logits(model, inp, att, tgt)
            part = torch.nn.functional.cross_entropy(logits.float(), targets, reduction="sum") / supervised
            part.backward()
            total += part.item()
        if aux_loss is not None:
            aux_loss(model).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(total)
        if on_step is not None:
            on_step(step, losses[-1])
    model.eval()
    return losses


def _row_groups(
    batch: list[tuple[list[int], list[bool]]], micro_batch_tokens: int | None
) -> list[list[tuple[list[int], list[bool]]]]:
    """The batch's rows in groups of at most `micro_batch_tokens` padded tokens (rows x longest
    row; a row longer than that is a group of its own); one group without a limit."""
    if micro_batch_tokens is None:
        return [batch]
    groups: list[list[tuple[list[int], list[bool]]]] = [[]]
    for row in sorted(batch, key=lambda r: len(r[0])):
        longest = max([len(row[0])] + [len(r[0]) for r in groups[-1]])
        if groups[-1] and longest * (len(groups[-1]) + 1) > micro_batch_tokens:
            groups.append([])
        groups[-1].append(row)
    return groups


def _padded(rows: list[tuple[list[int], list[bool]]], pad_id: int) -> tuple[torch.Tensor, ...]:
    """(input ids, attention mask, next-token targets with -100 off the supervised positions)."""
    n = max(len(ids) for ids, _ in rows)
    inp = torch.full((len(rows), n), pad_id, dtype=torch.long)
    tgt = torch.full((len(rows), n), -100, dtype=torch.long)
    att = torch.zeros((len(rows), n), dtype=torch.long)
    for r, (ids, mask) in enumerate(rows):
        inp[r, : len(ids)] = torch.tensor(ids)
        att[r, : len(ids)] = 1
        labels = torch.tensor([i if m else -100 for i, m in zip(ids, mask, strict=True)])
        tgt[r, : len(ids) - 1] = labels[1:]
    return inp, att, tgt


def _supervised_logits(
    model: Any, inp: torch.Tensor, att: torch.Tensor, tgt: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """(logits, targets) at the supervised positions: the decoder's hidden states, then the
    vocabulary projection on those rows alone. A model without the usual decoder/head split, or
    whose head is more than a projection (logit soft-capping), gives every position's logits."""
    prefix = getattr(model, "base_model_prefix", "")
    base = getattr(model, prefix, None) if prefix else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    plain = getattr(getattr(model, "config", None), "final_logit_softcapping", None) is None
    if base is None or base is model or head is None or not plain:
        logits = model(input_ids=inp, attention_mask=att).logits
        return logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1)
    hidden = base(input_ids=inp, attention_mask=att).last_hidden_state
    keep = tgt != -100
    return head(hidden[keep]), tgt[keep]
