"""inhabit.harness: the agent loop, the same for `inhabit agent` and for RL rollouts.

Entry points (import them from their modules; this package imports nothing heavy):
- `loop.run_episode(policy, sandbox, instruction, config=...) -> types.Trajectory`
- `rollout.run_rollout(task, policy, provider, config=...)`: sandbox + episode + grading
- `parse.parse_tool_calls` / `parse.render_call`: the tool-call format
- `tools.TOOLS`: the ten tools; `execute.execute_calls`: one turn's calls, concurrently
- policies: `inhabit.contracts.Policy` (the interface), `replay.ReplayPolicy` here; `OpenAIPolicy`,
  `LocalPolicy` and `make_policy` in `inhabit.inference`
- `config.HarnessConfig`; `agent` and `cli`: the `inhabit agent` / `inhabit replay` commands
See docs/architecture.md ("The ten tools", "Actions file", "Trajectory record") and docs/harness.md.
"""
