"""inhabit.orchestrator: `inhabit train`, the async/sync pipeline and the quickstart (docs/training.md)."""
