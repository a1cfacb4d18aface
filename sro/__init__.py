"""sro: the Special Resource Operator.

Makes GPUs and other special hardware usable by Kubernetes workloads: node feature discovery,
ordered driver → validation → device-plugin → monitoring states, the kubelet device plugin, OCI hook
and CDI injection, and a metrics exporter. See README.md for the tour and design notes.
"""

__version__ = "0.1.0"
