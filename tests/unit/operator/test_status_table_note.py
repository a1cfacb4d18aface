"""`sro status` shows what a validated node's validations skipped (the status row's `note`): on the
simulated NVIDIA driver the CUDA sample is skipped, and the table must say so, not only the YAML."""

from __future__ import annotations

from sro.api.names import validated_label
from sro.operator.observed import NodeInfo, SpecialResourceInfo
from sro.operator.status_table import node_rows

SR = "simulated-nvidia"
NOTE = "cuda sample: no CUDA on a simulated driver (the driver is sro's simulated one: nothing runs CUDA)"


def test_a_validated_rows_note_is_in_its_detail() -> None:
    status = {
        "nodes": [
            {"name": "a", "state": "validated", "since": "t0", "note": NOTE},
            {"name": "b", "state": "validated", "since": "t1"},
        ]
    }
    sr = SpecialResourceInfo(SR, "u", {"recipe": "nvidia-gpu"}, status=status)
    nodes = [NodeInfo(n, labels={validated_label(SR): "true"}) for n in ("a", "b")]
    rows = {r[0]: r[-1] for r in node_rows(sr, nodes)}
    assert rows == {"a": f"validated since t0; skipped {NOTE}", "b": "validated since t1"}
