"""Generated task families (`inhabit tasks generate --family NAME`): quickstart (one-line bugs in a
two-function module) and multistep (a bug hidden in a small package, found by testing and search)."""
