"""Container runtime injection: OCI hook, runc wrapper and CDI specs for the recipes' hardware.

Kept import-free on purpose: `python -m sro.node.runtime.hook` sits on every container start.
"""
