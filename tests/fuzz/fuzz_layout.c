/*
 * Fuzzes the layout string parser (pt_layout_parse, pt_layout_parse_stack and
 * pt_order_parse: planner/layout.c). The first input byte picks the world size and
 * global batch the parser derives dp and n_micro from; the rest is the string. A
 * layout it accepts must format to a string that parses back to the same layout, and
 * the validity rules and stage split must take it without fault.
 */
#include "fuzz.h"
#include "planner.h"

static const int64_t worlds[] = {0, 1, 8, 64, 1024, 3, 16384, 96};
static const int64_t batches[] = {0, 64, 1, 1536, 7, 4096, 12, 1 << 20};

/* The rules of a model on a cluster of `world` ranks, and, when they hold, every
 * virtual stage's layers. */
static void check_on(const pt_layout *l, int64_t world, int64_t global_batch)
{
    pt_model m;
    pt_cluster c;
    pt_err err;
    if (pt_model_get("llama3-8b", &m, &err) || pt_cluster_get("dgx-h100", &c, &err))
        abort();
    if (world > 0 && world % c.devices_per_node == 0)
        c.nodes = (int)(world / c.devices_per_node);
    uint32_t mask = 0;
    if (pt_layout_check(&m, &c, global_batch, l, &mask) != 0)
        return;
    int64_t total = 0;
    for (int vs = 0; vs < l->pp * l->vp; vs++) {
        int64_t first;
        int64_t n = pt_stage_layers(&m, l, vs, &first);
        total += n; /* a stage of a pipeline layout may hold none, even the last */
        FUZZ_CHECK(n >= 0 && first >= 0 && first + n <= m.layers);
    }
    FUZZ_CHECK(total == m.layers);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int64_t world = worlds[data[0] & 7], global_batch = batches[data[0] >> 3 & 7];
    char *text = fuzz_text(data + 1, size - 1);
    pt_err err;
    pt_layout l;
    pt_layout_default(&l);
    if (pt_layout_parse(text, world, global_batch, &l, &err) == 0) {
        char canon[1024];
        pt_layout_format(&l, canon, sizeof canon);
        pt_layout back;
        pt_layout_default(&back);
        FUZZ_CHECK(pt_layout_parse(canon, world, global_batch, &back, &err) == 0);
        char again[1024];
        pt_layout_format(&back, again, sizeof again);
        FUZZ_CHECK(strcmp(canon, again) == 0);
        check_on(&l, world, global_batch);
    }
    pt_layout_default(&l);
    const pt_stack *stack = pt_stack_builtin(data[0] % pt_stack_builtin_count());
    (void)pt_layout_parse_stack(text, world, global_batch, stack, &l, &err);
    pt_dim order[PT_NDIM];
    (void)pt_order_parse(text, order, &err);
    free(text);
    return 0;
}
