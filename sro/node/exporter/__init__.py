"""`sro exporter`: Prometheus metrics of a recipe's devices, a drop-in for dcgm-exporter.

Layout: the kubelet's pod-resources `List` comes from `sro.host.podresources` (shared with the
device plugin); pure logic in `attribution` (which container holds which
device), `nodefacts` (allocatable, stack state), `config` (health policy) and `exposition` (the
exposition text); `collecting` asks the sources every interval into an immutable snapshot;
`serving` hands out its bytes; `commands` is the CLI. Readings come from `sro.devices.telemetry`
(NVML, or the simulated model `sro.devices.simreadings`), health from `sro.devices.health`.
"""
