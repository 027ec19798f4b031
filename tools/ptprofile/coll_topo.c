/*
 * ptprofile-coll: agreement on errors and the node layout of the ranks. Agreement is
 * what keeps a failing rank (no GPU, no memory, an unwritable output file) from
 * leaving the others waiting in a collective: each fallible step is followed by
 * pt_cb_agree, and every rank takes the same branch. The node layout gives each
 * measured group its ranks_per_node, which the cost tables key collectives by.
 */
#include "coll_bench.h"

#include <limits.h>
#include <stdlib.h>

int pt_cb_agree(MPI_Comm comm, int rc, pt_err *err)
{
    int rank, first;
    MPI_Comm_rank(comm, &rank);
    int mine = rc == 0 ? INT_MAX : rank;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
    if (first == INT_MAX)
        return 0;
    pt_err tmp;
    pt_err *e = err ? err : &tmp;
    MPI_Bcast(e->msg, (int)sizeof e->msg, MPI_CHAR, first, comm);
    e->msg[sizeof e->msg - 1] = '\0';
    return -1;
}

/* A node is named by the lowest world rank on it; node_of renumbers those names
 * 0, 1, … in order of first appearance. */
static void number_nodes(pt_cb_topo *t, const int *leader)
{
    t->nodes = 0;
    for (int r = 0; r < t->world; r++) {
        if (leader[r] == r)
            t->node_of[r] = t->nodes++;
        else
            t->node_of[r] = t->node_of[leader[r]];
    }
}

int pt_cb_topo_init(pt_cb_topo *t, pt_err *err)
{
    *t = (pt_cb_topo){0};
    MPI_Comm_size(MPI_COMM_WORLD, &t->world);
    MPI_Comm_rank(MPI_COMM_WORLD, &t->rank);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, t->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &t->local_rank);
    MPI_Comm_size(node, &t->local_size);
    int leader;
    MPI_Allreduce(&t->rank, &leader, 1, MPI_INT, MPI_MIN, node);
    MPI_Comm_free(&node);

    int *leaders = malloc(sizeof *leaders * (size_t)t->world);
    t->node_of = malloc(sizeof *t->node_of * (size_t)t->world);
    int rc = leaders && t->node_of ? 0 : pt_err_set(err, "out of memory for %d ranks", t->world);
    if (pt_cb_agree(MPI_COMM_WORLD, rc, err) != 0) {
        free(leaders);
        pt_cb_topo_free(t);
        return -1;
    }
    MPI_Allgather(&leader, 1, MPI_INT, leaders, 1, MPI_INT, MPI_COMM_WORLD);
    number_nodes(t, leaders);
    free(leaders);
    return 0;
}

void pt_cb_topo_free(pt_cb_topo *t)
{
    free(t->node_of);
    t->node_of = NULL;
}

int pt_cb_topo_ranks_per_node(const pt_cb_topo *t, int group)
{
    int most = 0;
    for (int n = 0; n < t->nodes; n++) {
        int count = 0;
        for (int r = 0; r < group && r < t->world; r++)
            count += t->node_of[r] == n;
        if (count > most)
            most = count;
    }
    return most;
}
