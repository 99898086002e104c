"""The markers of graph splits and cuts ptc asks for itself.

A traced call to graph_split ends the graph (PTC-B027); a traced call to
graph_cut does not: the trace goes on, and the training backend compiles
the graph as pieces cut there, each one autograd node (compiler/capture/
backend/backend_pieces.c), run by GraphPieces. compiler/capture/trace/
trace_split.c knows both markers by identity; run for real, they do
nothing. This module imports nothing at its top, so the capture can look
the markers up cheaply.
"""


def graph_split(reason):
    """Ends the current graph here when traced by ptc; a no-op when run."""
    return None


def graph_cut(reason):
    """Cuts the current graph here into pieces compiled and differentiated
    separately when traced by ptc (one graph, no break); a no-op when run."""
    return None


class GraphPieces:
    """A graph cut into pieces, run one program per piece, each applied as
    its own autograd node (ptc._autograd.apply), so each piece's parameter
    gradients are ready when its backward ends. Values live in slots (the
    graph's inputs first); steps are (program, input slots, output slots)
    in graph order; outputs the slots of the graph's outputs. A slot is
    let go after the last step that reads it."""

    def __init__(self, nslots, steps, outputs):
        from ._autograd import apply  # not at the top: the capture imports this module cheaply

        self.apply = apply
        self.nslots, self.steps, self.outputs = nslots, steps, outputs
        keep = set(outputs)
        last = {}
        for k, (_, ins, _) in enumerate(steps):
            for slot in ins:
                last[slot] = k
        self.release = [[] for _ in steps]  # per step: the slots no later step reads
        for slot, k in last.items():
            if slot not in keep:
                self.release[k].append(slot)

    def __call__(self, *inputs):
        apply = self.apply
        values = list(inputs) + [None] * (self.nslots - len(inputs))
        for (program, ins, outs), release in zip(self.steps, self.release):
            results = apply(program, *[values[i] for i in ins])
            for slot in release:
                values[slot] = None
            for slot, value in zip(outs, results):
                values[slot] = value
        return tuple(values[i] for i in self.outputs)
