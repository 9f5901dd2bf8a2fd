"""evalb: Eval B for os-adr — shared core (scenarios, archive schema and storage, errors, paths)."""

__version__ = "0.1.0"
