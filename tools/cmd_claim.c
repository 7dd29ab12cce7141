/* kvfsctl claim - claim a chunk at a mount (KVFS_IOC_CLAIM) for a script
 * that computes it by other means, or hold a claim for a while (tests). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "kvfs.h"
#include "tool_util.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: kvfsctl claim -M MOUNT [--timeout S] [--hold S] HASH\n"
               "Claim chunk HASH before computing it (kvfs(8), REMOTE TIER, Claims).\n"
               "Prints \"present\" "
               "(the mount or its pool has it; exit 0) or \"yours\" (compute it; exit 0)\n"
               "followed by \"fleet\" (a lease in RADOS) or \"local\", and the wait in ms.\n"
               "A claim lasts while kvfsctl runs: store the chunk through the mount within\n"
               "--hold, or the claim ends with kvfsctl and another host computes it.\n\n"
               "  -M, --mount DIR   the mount\n"
               "  --timeout S       wait at most S seconds for another host (default 600)\n"
               "  --hold S          keep a claim that is ours S seconds, or until the chunk is\n"
               "                    stored (default 0: end it at once)\n");
}

int cmd_claim(int argc, char **argv)
{
    const char *mount = NULL;
    int timeout = 600, hold = 0;
    const struct tool_opt opts[] = {TOOL_OPT("mount", 'M', STR, &mount), TOOL_OPT("timeout", 0, INT, &timeout),
                                    TOOL_OPT("hold", 0, INT, &hold), {0}};
    const struct tool_cmd cmd = {usage, opts, 1, 1};
    int rc = tool_parse_args(&cmd, argc, argv);
    if (rc != TOOL_ARGS_OK)
        return rc;
    if (!mount || timeout < 0 || timeout > 86400 || hold < 0)
        return tool_usage_error(&cmd);
    const char *hash = argv[optind];
    struct libkvfs_claim c;
    char err[256], path[4096];
    if ((rc = libkvfs_claim(mount, hash, (uint32_t)timeout * 1000u, &c, err, sizeof(err)))) {
        fprintf(stderr, "kvfsctl claim: %s\n", err);
        return 1;
    }
    printf("%s %s %u\n", c.present ? "present" : "yours", c.fleet ? "fleet" : "local", c.waited_ms);
    fflush(stdout);
    snprintf(path, sizeof(path), "%s/chunks/%s.kv", mount, hash);
    for (int i = 0; !c.present && i < hold * 10 && access(path, F_OK) != 0; i++)
        usleep(100 * 1000);
    libkvfs_claim_end(&c);
    return 0;
}
