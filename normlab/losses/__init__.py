"""Losses (moving in)."""
