/* commands.h - kvfsctl subcommands.  Each lives in tools/cmd_NAME.c and is
 * declared weak so the tool links while a command is absent from the build.
 * A command gets argv[0] = its own name and returns the process exit code:
 * 0 success, 1 failure, 2 usage error. */
#ifndef KVFS_COMMANDS_H
#define KVFS_COMMANDS_H

#define KVFS_CMD(name) int cmd_##name(int argc, char **argv) __attribute__((weak))
KVFS_CMD(info);
KVFS_CMD(fsck);
KVFS_CMD(synth);
KVFS_CMD(prefill);
KVFS_CMD(generate);
KVFS_CMD(tokenize);
KVFS_CMD(logits);
KVFS_CMD(mkmodel);
KVFS_CMD(blend);
KVFS_CMD(eval);
KVFS_CMD(import);
KVFS_CMD(compare);
KVFS_CMD(dequant);
KVFS_CMD(convert);
KVFS_CMD(remote);
KVFS_CMD(claim);
#undef KVFS_CMD

#endif
