"""The only code that talks to the Kubernetes API (lightkube, server-side apply)."""
