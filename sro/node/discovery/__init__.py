"""Node feature discovery, label-compatible with kubernetes-sigs/node-feature-discovery (NFD).

Sources (one module each, listed once in `sources.SOURCES`) read the node through an injected
HostRoot and return raw features; `labeling` turns features into labels under NFD's options;
`accelerators` maps a device inventory to GFD-compatible labels; `publishing` keeps the node's
labels in step through `sro.kube.nodes`. `command` is the `sro discover` CLI.
"""
