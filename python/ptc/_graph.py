"""ptc.Graph: a captured graph, as handed to callable backends and listed by
ptc.explain."""
import collections

Node = collections.namedtuple("Node", "id op text outputs types file line col source module")


class Graph:
    """A stage-1 graph captured by ptc.

    nodes    the ops in program order (Node: op, printed text, output types,
             source file:line:col, the source text, the nn.Module path)
    inputs   (name, type) pairs; outputs likewise
    run(*tensors) runs the graph through torch ops and returns its outputs
    str(g)   the .ptir text
    """

    def __init__(self, handle):
        self._h = handle

    @property
    def nodes(self):
        return [Node(**{k: d[k] for k in Node._fields}) for d in self._h.nodes()]

    @property
    def inputs(self):
        return self._h.inputs()

    @property
    def outputs(self):
        return self._h.outputs()

    def __len__(self):
        return self._h.node_count()

    def ops(self):
        """Op names, in order."""
        return [n["op"] for n in self._h.nodes()]

    def run(self, *tensors):
        return self._h.run(*tensors)

    def __call__(self, *tensors):
        return self.run(*tensors)

    def __str__(self):
        return self._h.ptir()

    def __repr__(self):
        return "<ptc.Graph: %d nodes, %d inputs, %d outputs>" % (
            len(self), len(self.inputs), len(self.outputs))
