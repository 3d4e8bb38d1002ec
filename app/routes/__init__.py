"""Route modules of the project's HTTP app."""
