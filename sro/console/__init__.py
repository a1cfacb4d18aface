"""Terminal-facing pieces shared by commands: step progress and shared click options."""
