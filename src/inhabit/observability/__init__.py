"""inhabit.observability: metrics.jsonl, TensorBoard/W&B writers and progress display (docs/training.md)."""
