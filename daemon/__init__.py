"""Sightscreen daemon: the real-time engine (live cricket -> Live Activities and pushes)."""

__version__ = "0.1.0"
