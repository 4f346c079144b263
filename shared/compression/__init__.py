"""Tiered history compression: the 50/30/20 loop, its summarizers and its state in SQL."""
