/* dotcheck: re-parses a .dot file with libcgraph (as any Graphviz tool
 * would) and lists what it holds, for ptview's render tests:
 *   nodes N / edges E / node NAME... / cluster NAME...
 * Exit status 1 when the file does not parse.
 */
#include <graphviz/cgraph.h>
#include <stdio.h>
#include <string.h>

static void clusters(Agraph_t *g)
{
    for (Agraph_t *s = agfstsubg(g); s; s = agnxtsubg(s)) {
        if (strncmp(agnameof(s), "cluster", 7) == 0)
            printf("cluster %s\n", agnameof(s));
        clusters(s);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: dotcheck FILE.dot\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    Agraph_t *g = agread(f, NULL);
    fclose(f);
    if (!g) {
        fprintf(stderr, "dotcheck: %s: libcgraph could not parse it\n", argv[1]);
        return 1;
    }
    printf("nodes %d\nedges %d\n", agnnodes(g), agnedges(g));
    for (Agnode_t *n = agfstnode(g); n; n = agnxtnode(g, n))
        printf("node %s\n", agnameof(n));
    clusters(g);
    agclose(g);
    return 0;
}
