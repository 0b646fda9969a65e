"""Generated task families (`inhabit tasks generate --family NAME`) and their scripted experts:
quickstart (one-line bugs in a two-function module; `quickstart_expert`) and multistep (a bug
hidden in a small package, found by testing and search; `multistep_expert`)."""
