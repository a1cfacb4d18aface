"""The special resource operator: kopf handlers (thin) over a pure reconcile of ordered states."""
