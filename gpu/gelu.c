/* gelu.c - ggml's GELU, tanh form: one definition, so the CPU backend and
 * the CUDA plugin (which links this object) tabulate the same values. */
#include <math.h>

#include "gelu.h"

float kvfs_gelu_tanh(float x)
{
    return 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x * (1.0f + 0.044715f * x * x)));
}
