"""Driver upgrades: one node at a time through a visible state machine (pure).

Why a state machine held on the Node: replacing a driver under a process that holds the device
hangs the unload or kills the work, and a half-upgraded node must not take work. So each node walks
`upgrade-required → cordoned → waiting-for-jobs → pods-evicted → driver-replaced → validated →
uncordoned → done` (or `failed`, with the reason), recorded in a node label (for selectors) and a
node annotation (the step times, who cordoned, the old and new revision). Everything is decided
from records; an operator restarted mid-upgrade reads the labels and goes on.

The modules, by job: `record` (the step names and the annotation's codec), `revision` (which
driver a spec asks for), `scan` (the holder-scan pod and its verdict), `machine` (one pass over the
selected nodes) and `adapter` (the machine inside a reconcile: facts in, node patches out).
"""
