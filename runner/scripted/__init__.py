"""The scripted model: a loopback Messages API server playing named policies."""
