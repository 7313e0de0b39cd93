"""Backends behind one engine interface: ``embedded`` (default, in-process)."""
