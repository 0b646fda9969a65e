"""inhabit.rewards: reward composition from a grade and other signals.

- `compose`: the weighted reward of a rollout (tests, lint, diff size, judges)
- `judge`: LLM judges scoring rubric dimensions

The grade itself (sealed test runs, canaries, hack flags, the grade cache) is `inhabit.grading`'s.
"""
