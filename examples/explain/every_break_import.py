"""Imported by every_break.py inside a compiled function (PTC-B020)."""
VALUE = 7
