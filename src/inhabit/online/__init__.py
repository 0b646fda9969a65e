"""inhabit.online: reserved for learning from `inhabit agent` sessions (docs/architecture.md); empty."""
