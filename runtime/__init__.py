"""Process-wide runtime pieces: configuration, models, paths and state."""
