"""Scale by simulation: the real scheduling, buffer, dispatch and weight-sync code driven by
simulated engines, env servers and trainer on virtual time (`inhabit scale simulate`, docs/scale.md)."""
