"""GPU node pools: from an existing worker MachineSet or MachineDeployment, the GPU pool's objects.

Pure generation (no I/O) in `instancetypes`, `request`, `machinesets`, `clusterapi`, `generating`;
`command` is the thin `sro nodepool` glue, and `sro.kube.machines` reads and applies.
"""
