# Sourced by the tests that run every architecture on a synthetic model
# (tests/oracle/synth_arch.sh, synth_arch_views.sh, tests/gpu/arch_cuda.sh):
# the names in their lists that are a variant of an architecture, in one place.
# Not a test itself (tests/run.sh runs tests/*/*.sh only).

# arch_variant NAME: sets base (kvfsctl mkmodel's --arch) and scaling (its
# other flags, an array) for NAME:
#   ARCH@KIND      ARCH with RoPE scaling of that kind, factor 4 (llama@yarn,
#                  gemma3@linear)
#   deepseek2-kvb  deepseek2 in the unabsorbed MLA form of older files
#                  (attn_kv_b; V_NARROW chunks)
#   ARCH           ARCH as it is
arch_variant() {
    local name=$1
    base=${name%@*} scaling=()
    [ "$base" != "$name" ] && scaling=(--rope-scaling "${name#*@}" --rope-factor 4)
    [ "$base" = deepseek2-kvb ] && base=deepseek2 scaling=(--mla-unabsorbed)
    return 0
}
