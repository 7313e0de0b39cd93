"""Reproductions of the papers' experiments (``sluice experiment NAME``)."""
