"""inhabit.rollouts: G episodes of a task through the harness, a sandbox and an engine, as a group.

config.py (`RolloutConfig`, the `[rollout]` table), runner.py (`EngineRunner`, the rollout runner
on one engine; `guarded_rollout`, the episode that never raises; `Slots`; `TrajectoryLog`). The
Ray placement's `DispatchRunner` builds on `EngineRunner`.
"""
