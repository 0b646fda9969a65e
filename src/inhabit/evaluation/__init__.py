"""inhabit.evaluation: run the exact training harness over task sets and score a model (`inhabit eval`)."""
