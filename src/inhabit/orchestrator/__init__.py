"""inhabit.orchestrator: see ../shared/DESIGN.md, section "The parts and how data flows"."""
