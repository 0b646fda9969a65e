"""inhabit.weights: weight snapshots and lossless deltas, stores, publish/subscribe (docs/weights.md)."""
