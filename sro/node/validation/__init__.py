"""Validation: the checks the operator's per-node validation pods run (`sro validate driver|workload`).

Why their own agent: a state is ready on a node when it is proven there, not when its pod runs. Each
check is one module: `observe` gathers facts from the node (through `sro.host` and `sro.devices`, or
by running the recipe's tool) and a pure `evaluate` turns facts into results that unit tests hit
directly; `report` prints them the same way for every check.
"""
