"""Self-healing GPU nodes: a fault becomes a node condition, a policy repairs the node (pure).

Why beside the upgrade machine, and shaped like it: repairing a node is the same walk as upgrading
its driver (cordon, evict with PodDisruptionBudgets, act on the device, revalidate, uncordon; what sro
cordoned it uncordons, an admin's cordon never), kept in a record on the node so an operator
restarted mid-step goes on. The fault classes and which Xids belong to each are data
(`sro.devices.faultclasses`). The modules, by job: `record` (the steps and the annotation's codec),
`policy` (which action a node's faults get, each action's steps and timeouts), `breaker` (how many
nodes may be out of service at once), `evictions` (which pods leave), `conditions` (the GpuHealthy
Node condition) and `machine` (one pass over the nodes: facts in, actions out).
"""
