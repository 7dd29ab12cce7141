/* iface.c - one ISA level's CPU backend table: the level's kernels (their
 * names suffixed by level.h) beside the level-free memory and weight entries
 * of backend.c.  Compiled once per level. */
#include "level.h"

#include "dequant_simd.h"
#include "internal.h"

static const struct kvfs_backend_iface cpu_iface = {
    .name = "cpu",
    .thread_safe = 1,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .synchronize = cpu_sync,
    .copy = cpu_copy,
    .weight_create = cpu_weight_create,
    .weight_free = cpu_weight_free,
    .weight_create_quant = cpu_weight_create_quant,
    .matmul_act = cpu_matmul_act,
    .weight_rows = cpu_weight_rows,
    .matmul = cpu_matmul,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .add = cpu_add,
    .swiglu = cpu_swiglu,
    .get_rows = cpu_get_rows,
    .attention = cpu_attention,
    .attn_mass = cpu_attn_mass,
    .row_sqdiff = cpu_row_sqdiff,
    .gather_rows = cpu_gather_rows,
    .scatter_rows = cpu_scatter_rows,
    .act_quant = cpu_act_quant,
    .round_f16 = cpu_round_f16,
    .upload_kv = cpu_upload_kv,
    .topk = cpu_topk,
    .destroy = cpu_destroy,
    .scale = cpu_scale,
    .mul_rows = cpu_mul_rows,
    .attention_sinks = cpu_attention_sinks,
    .attn_mass_sinks = cpu_attn_mass_sinks,
    .swiglu_oai = cpu_swiglu_oai,
    .geglu = cpu_geglu,
    .trim = cpu_trim,
    .upload_kvq = cpu_upload_kvq,
    .host_memory = 1,
};

const struct cpu_level_kernels cpu_level_table = {&cpu_iface, kvfs_dequant_simd};
