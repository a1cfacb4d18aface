"""A real single-node Kubernetes on this machine: the embedded default for the demo and e2e tests."""
