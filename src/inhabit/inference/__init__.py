"""inhabit.inference: the embedded engine, the OpenAI-compatible server, engine clients (docs/engine.md)."""
