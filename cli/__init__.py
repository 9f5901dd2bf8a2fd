"""The command-line layer: every console script and subcommand, and the one error boundary (cli.app)."""
