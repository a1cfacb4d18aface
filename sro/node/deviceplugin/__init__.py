"""`sro device-plugin`: the kubelet device-plugin API v1beta1 for a recipe's devices.

Layout: `api.proto` + generated modules (`python -m sro.node.protogen` regenerates/checks them); pure logic in
`config`, `announcing` (MIG strategy, time-slicing), `allocation`, `preferred`; the health rules are
`sro.devices.health` (shared with the exporter); `core` holds the shared state; `servicer` is the
thin gRPC layer; `server` serves one resource on one socket and registers it; `lifecycle` watches
the kubelet socket and keeps everything running.
"""
