"""Node feature discovery, label-compatible with kubernetes-sigs/node-feature-discovery (NFD).

Sources (one module each, listed once in `sources.SOURCES`) read the node through an injected
HostRoot and return raw features; `labeling` turns features into labels under NFD's options;
`accelerators` maps a device inventory to GFD-compatible labels; `publishing` keeps the node's
labels in step through `sro.kube.nodes`; `nodefeature` writes the raw features as NFD's NodeFeature
object. The rule language of the `custom` source is `sro.nfd`'s (shared with the operator's
NodeFeatureRules). `commands` is the `sro discover` CLI.
"""
