"""node-feature-discovery's rule language and NodeFeature model, pure: shared by the node agent and the operator."""
