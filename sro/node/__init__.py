"""Agents that run on every node (DaemonSet payloads of the one sro image). They never import each other."""
