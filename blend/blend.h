/* blend.h - compose several chunks' KV caches CacheBlend-style.
 *
 * The prompt is chunk_1 .. chunk_k followed by suffix tokens (the query).
 * Each chunk's KV was computed on its own (keys after RoPE at its own
 * positions).  kvfs_blend:
 *   1. concatenates the cached K/V and re-rotates every chunk's keys by the
 *      delta between its new and its cached positions (one RoPE call with
 *      pos = delta; RoPE rotations compose, checked by kvfs_blend_selftest);
 *   2. recomputes layer 0 fully, and at the check layer (layer 1) computes
 *      every token's fresh K/V, keeps them all, and selects the `ratio` share
 *      of chunk tokens whose fresh V deviates most (squared L2 over heads and
 *      dims) from the cached V, plus every suffix token;
 *   3. from then on recomputes only the selected rows, layer by layer, their
 *      queries attending over the whole blended context with an exact causal
 *      mask (each row sees exactly the positions up to its own), and
 *      overwrites their K/V in the blended cache.
 * That is CacheBlend's selection (select=fixed; select=gradual is the
 * paper's layer-by-layer filtering).  The default, select=query, chooses
 * rows by what the answer depends on instead: a first pass runs only the
 * suffix rows through every layer over the re-positioned cache (a plain
 * reuse) and sums the attention they pay each chunk row over the upper two
 * thirds of the layers, heads and suffix rows; the `ratio` share of chunk rows with the most attention
 * (plus each later chunk's first row) is then recomputed from layer 0, with
 * the same exact mask; the prompt's first chunk is never picked (a prefix
 * computed alone is exact already).  It needs every layer before it chooses, so it does
 * not hide loading behind recompute as the others do (ratio=auto selects
 * at the check layer).  BENCHMARKS.md compares them.
 * ratio 1 recomputes everything (a full prefill); ratio 0 is plain reuse
 * (no chunk row recomputed; only the suffix is computed). */
#ifndef KVFS_BLEND_H
#define KVFS_BLEND_H

#include <stddef.h>
#include <stdint.h>

#include "forward.h"

struct kvfs_blend_chunk {
    const void *image; /* a verified v1 chunk file image */
    size_t len;
};

struct kvfs_blend_stats {
    int n_ctx;          /* tokens in the blended prompt */
    int n_chunk_rows;   /* of which come from chunks */
    int n_selected;     /* chunk rows recomputed after the check layer */
    float ratio;        /* the ratio used (auto: the controller's pick) */
    double seconds;     /* wall time of kvfs_blend */
    double load_s;      /* loader: from start until the last layer was verified */
    double wait_s;      /* time the blend waited for layers (not hidden by compute) */
    double compute_s;   /* seconds - wait_s */
    uint64_t bytes_read;/* from storage by the loader */
    int n_direct;       /* chunks the loader read O_DIRECT (cold objects) */
    int full_prefill;   /* 1: short enough to be prefilled in full (opts.full_below) */
};
#define KVFS_BLEND_MAX_CHUNKS 64
/* The recompute ratio when none is given, and ratio=auto's default floor:
 * CacheBlend's ~15% (BENCHMARKS.md has the curve). */
#define KVFS_BLEND_DEFAULT_RATIO 0.15f
/* A recompute ratio is in [0, 1]; ratio=auto's floor (min_ratio) in (0, 1],
 * KVFS_BLEND_DEFAULT_RATIO when none is given: these, and the parsing of
 * -o min_ratio=, are blend.c's alone. */
int kvfs_blend_ratio_ok(float ratio);
int kvfs_blend_min_ratio_ok(float min_ratio);
/* text (NULL: not given) -> *min_ratio; -EINVAL when it is not a number in range */
int kvfs_blend_min_ratio_parse(const char *text, float *min_ratio);

/* How chunk rows are chosen for recompute (see kvfs_blend_ex). */
enum {
    KVFS_BLEND_SELECT_FIXED = 0,   /* CacheBlend's reference code: one selection at the check layer */
    KVFS_BLEND_SELECT_GRADUAL = 1, /* the paper's gradual filtering: the set shrinks layer by layer */
    KVFS_BLEND_SELECT_QUERY = 2,   /* by the attention the query pays each row over the reused cache */
};
#define KVFS_BLEND_SELECT_DEFAULT KVFS_BLEND_SELECT_QUERY

struct kvfs_blend_opts {
    float ratio;        /* mean share of chunk rows recomputed per layer (fixed, gradual: after the check layer) */
    int select;         /* KVFS_BLEND_SELECT_* */
    int sink_rows;      /* first rows of every chunk but the first always recomputed (when ratio > 0) */
    int check_layer;    /* layers before it recomputed in full; selection there (>= 1) */
    int auto_ratio;     /* ratio=auto: the loading controller picks it (controller.h) */
    float min_ratio;    /* auto: never below this (kvfs_blend_min_ratio_ok; default KVFS_BLEND_DEFAULT_RATIO) */
    int min_rows;       /* the floor: at least this many chunk rows (all, if fewer) recomputed when ratio > 0;
                         * the forced sink rows raise it to their count */
    int full_below;     /* prompts of at most this many tokens are prefilled in full (ratio 1) when ratio > 0 */
    float shift;        /* select=query: a later chunk's reused rows move by shift x the mean deviation
                         * of its recomputed rows, layer by layer (0: off; blend/shift.c) */
};
/* Variants of the rule that only kvfsctl eval and the tests set are
 * experiment.h's, not options: the blends kvfs serves never carry them. */
/* select=gradual: the recomputed share goes from ratio*(1+T) at the first
 * sparse layer down to ratio*(1-T) at the last (same mean) */
#define KVFS_BLEND_GRADUAL_TAPER 0.5f
/* The chunk shift's default: 0.4-0.8 measure alike per prompt; over 30
 * prompts on each of the four sets 0.6 left the least on average (kvfs(8),
 * BENCHMARKS.md "The shift factor over 30 prompts") */
#define KVFS_BLEND_SHIFT 0.6f
void kvfs_blend_opts_init(struct kvfs_blend_opts *o, float ratio);
/* The fidelity floor kvfs serves with (the mount's recipes, kvfsctl blend
 * and eval; the library's opts_init leaves it off): prompts of at most
 * KVFS_BLEND_FULL_BELOW tokens are prefilled in full (a blend saves little
 * there and can be worse than plain reuse), and at least
 * KVFS_BLEND_MIN_ROWS chunk rows are recomputed (BENCHMARKS.md, "Short
 * chunks and the fidelity floor"). */
#define KVFS_BLEND_FULL_BELOW 192
#define KVFS_BLEND_MIN_ROWS 96
void kvfs_blend_opts_floor(struct kvfs_blend_opts *o);
const char *kvfs_blend_select_name(int select);
/* "fixed", "gradual", "query" -> KVFS_BLEND_SELECT_*; -1 for anything else */
int kvfs_blend_select_parse(const char *name);

/* KL(p || q) of the next-token distributions of two logit vectors (n
 * entries): how far a blend's (q) is from a full prefill's (p). >= 0. */
double kvfs_logits_kl(const float *p_logits, const float *q_logits, int n);

/* Re-rotation self-test: rotating by p then q must equal rotating by p + q,
 * and by -p must undo p, for the model's RoPE style.  -EPROTO if not. */
int kvfs_blend_selftest(const struct kvfs_model *m);

/* Blend.  On success `cache` (initialised here; free with
 * kvfs_kv_cache_free) holds the blended KV of all n_ctx tokens, `tokens`
 * (malloc'ed) the prompt's ids, and logits (host, n_vocab, may be NULL) the
 * next-token logits after the last suffix token.  n_suffix must be >= 1.
 * Errors: -EINVAL (bad chunk, other model, bad ratio) with a reason in err. */
int kvfs_blend(const struct kvfs_model *m, const struct kvfs_blend_chunk *chunks, int n_chunks,
               const int32_t *suffix, int n_suffix, float ratio, struct kvfs_kv_cache *cache, int32_t **tokens,
               float *logits, struct kvfs_blend_stats *st, char *err, size_t errlen);

/* The same with every option (kvfs_blend uses kvfs_blend_opts_init's). */
int kvfs_blend_ex(const struct kvfs_model *m, const struct kvfs_blend_chunk *chunks, int n_chunks,
                  const int32_t *suffix, int n_suffix, const struct kvfs_blend_opts *o, struct kvfs_kv_cache *c,
                  int32_t **tokens, float *logits, struct kvfs_blend_stats *st, char *err, size_t errlen);

/* The same, streaming the chunks' layers from a loader (blend/loader.h):
 * layer L+1.. load while L is computed.  The loader must not be started. */
struct kvfs_loader;
int kvfs_blend_stream(const struct kvfs_model *m, struct kvfs_loader *ld, const int32_t *suffix, int n_suffix,
                      const struct kvfs_blend_opts *o, struct kvfs_kv_cache *c, int32_t **tokens, float *logits,
                      struct kvfs_blend_stats *st, char *err, size_t errlen);

/* Batched blends over one loader holding the union of their chunks
 * (select=query, a fixed ratio): the members' first n_shared chunks are the
 * same chunks at the same positions.  Each member's query runs its first
 * pass alone and weighs every row.  In the shared prefix the rows all
 * queries weigh most together (each member's weights there summing to 1),
 * the ratio of them, are recomputed once (a prefix row only sees the
 * prefix, so its fresh K/V are the same for every member); each member
 * then recomputes the ratio of its own rows after the prefix its query
 * weighs most, and its query, over that blended prefix.  A batch of one is
 * exactly kvfs_blend_stream's query selection.  Loading and
 * re-positioning the prefix happen once.  Each member's result goes to
 * done() as soon as it is ready (one cache serves every member in turn);
 * a non-zero return from done() stops the batch with that error. */
struct kvfs_blend_member {
    const int *chunks;      /* loader indices in prompt order; the first n_shared equal in every member */
    int n_chunks;
    const int32_t *suffix;  /* the query */
    int n_suffix;
};
typedef int (*kvfs_blend_done_fn)(void *ctx, int member, const struct kvfs_kv_cache *c, const int32_t *tokens,
                                  const struct kvfs_blend_stats *st);
int kvfs_blend_batch(const struct kvfs_model *m, struct kvfs_loader *ld, const struct kvfs_blend_member *mb,
                     int n_mb, int n_shared, const struct kvfs_blend_opts *o, kvfs_blend_done_fn done, void *ctx,
                     char *err, size_t errlen);

/* kvfs_blend_ex with a variant of experiment.h (x NULL: the served rule);
 * for kvfsctl eval and the tests */
struct kvfs_blend_experiment;
int kvfs_blend_eval(const struct kvfs_model *m, const struct kvfs_blend_chunk *chunks, int n_chunks,
                    const int32_t *suffix, int n_suffix, const struct kvfs_blend_opts *o,
                    const struct kvfs_blend_experiment *x, struct kvfs_kv_cache *c, int32_t **tokens, float *logits,
                    struct kvfs_blend_stats *st, char *err, size_t errlen);


#endif
