"""Compatibility with the STREAM 0.6.0 prototype: its script files, ``.dat`` data and output format."""
