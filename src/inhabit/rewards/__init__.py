"""inhabit.rewards: grading a final workspace and detecting reward hacking.

- `grading`: `grade(task, final_sandbox, provider) -> GradeResult`, `GradingConfig`
- `hacks`: neutralization before the run, the flag names (listed in its docstring), the code scan
- `infra`: what counts as a test, pytest configuration, a start-up hook, a shadowing module
"""
