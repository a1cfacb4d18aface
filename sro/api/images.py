"""The image pull policy sro picks when nobody names one.

Why one function: the operator's states, the upgrade's holder-scan pod and `sro install` all run
images that may have been imported straight into the node (`localhost/...`, no registry has them),
and the three must agree on the rule.
"""

from __future__ import annotations


def pull_policy_for(image: str) -> str:
    """Never for images imported into the node (`localhost/...`: no registry has them), else IfNotPresent."""
    return "Never" if image.startswith("localhost/") else "IfNotPresent"
