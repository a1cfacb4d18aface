"""The only code that reads the node. Every reader takes an injected HostRoot so tests pass a fake tree."""
