"""The marker of a graph split ptc asks for itself (PTC-B027).

A traced call to graph_split ends the graph (compiler/capture/trace/
trace_split.c knows this function by identity); run for real, it does
nothing. This module imports nothing, so the capture can look the marker
up cheaply.
"""


def graph_split(reason):
    """Ends the current graph here when traced by ptc; a no-op when run."""
    return None
