"""evalb package."""
