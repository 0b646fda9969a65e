"""inhabit: train coding agents with reinforcement learning inside the very harness they ship in.

The package is split into parts (see docs/architecture.md): sandbox, harness, tasks, rewards,
models, inference, trainer, orchestrator, weights, online, observability. Importing `inhabit`
is cheap on purpose: heavy dependencies (torch, transformers) load only in the parts that need
them, so the CLI starts fast.
"""

__version__ = "0.1.0"
