"""Runnable examples: `python -m stagecraft.examples.digits` (the main, end-to-end example)."""
from __future__ import annotations
