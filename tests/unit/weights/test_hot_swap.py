"""Hot swap: a subscriber follows a store and keeps a running embedded engine on the newest version."""

from __future__ import annotations

import asyncio

import torch

from inhabit.inference.config import EngineConfig
from inhabit.inference.embedded import EmbeddedEngine
from inhabit.inference.engine import GenerationRequest, SamplingParams
from inhabit.models.tiny import build_tiny_model
from inhabit.weights.publish import Publisher, PublisherConfig
from inhabit.weights.subscribe import Subscriber, SubscriberConfig

from .conftest import assert_same_weights


async def test_subscriber_hot_swaps_into_a_generating_engine(store_url, versions):
    pub = Publisher(store_url, PublisherConfig(full_every=4))
    pub.publish(versions[0])
    engine = EmbeddedEngine(
        build_tiny_model("dense-1m", seed=0), config=EngineConfig(dtype="bfloat16", stop_at_eos=False)
    )
    sub = Subscriber(store_url, SubscriberConfig(poll_interval_s=0.05))
    try:
        await sub.follow(engine, max_polls=1)
        assert engine.version == 0
        request = GenerationRequest([1, 2, 3, 4], SamplingParams(max_tokens=40, temperature=0.0))
        generating = asyncio.create_task(engine.generate([request]))
        for state in versions[1:4]:
            await asyncio.to_thread(pub.publish, state)
            await sub.follow(engine, max_polls=1)
        (completion,) = await generating
        assert engine.version == 3
        model_state = {k: v for k, v in engine.model.state_dict().items() if k in versions[3]}
        assert_same_weights(model_state, versions[3])
        assert engine.last_swap_seconds is not None
        # Versions only ever grow within a completion (swaps land between decoding steps).
        assert completion.versions == sorted(completion.versions)
    finally:
        await engine.close()


async def test_push_hands_only_changed_tensors_when_the_engine_is_current(store_url, versions):
    pub = Publisher(store_url, PublisherConfig(full_every=10))
    pub.publish(versions[0])
    sub = Subscriber(store_url)

    class Recorder:
        version = -1

        async def load_weights(self, weights, version):
            self.names = set(weights)
            self.version = version

    engine = Recorder()
    await sub.push(engine, sub.sync())
    assert engine.names == set(versions[0]) and engine.version == 0
    # A norm weight that does not change in one AdamW step at lr 1e-5 in bf16 is left out.
    pub.publish({**versions[1], "model.norm.weight": versions[0]["model.norm.weight"].clone()})
    result = sub.sync()
    await sub.push(engine, result)
    assert engine.version == 1 and "model.norm.weight" not in engine.names
    assert engine.names == result.changed and len(engine.names) > 0
    assert isinstance(next(iter(sub.state_dict().values())), torch.Tensor)
