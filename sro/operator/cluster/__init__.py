"""The operator's cluster I/O: what a pass reads, the watch-fed cache's records, carrying out a plan.

Everything here talks to the API server through `sro.kube`'s generic client functions; the
decisions (what to change, in which order) stay in the pure core of `sro.operator`.
"""
