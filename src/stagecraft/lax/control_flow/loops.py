"""Placeholder: filled in by the control-flow work."""
__all__: list = []
