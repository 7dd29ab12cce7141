/* model_info.h - kvfsctl info on a GGUF model (model_info.c) */
#ifndef KVFS_MODEL_INFO_H
#define KVFS_MODEL_INFO_H

/* 1 if path starts with GGUF's magic */
int tool_is_gguf(const char *path);
/* print what the model is and whether kvfs runs it (and if not, why);
 * 0 when it does, 1 when not or unreadable */
int tool_model_info(const char *path, int json);

#endif
