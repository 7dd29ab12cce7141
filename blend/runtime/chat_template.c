/* chat_template.c - libllama's built-in chat templates (llama.cpp
 * src/llama-chat.cpp, llm_chat_detect_template and llm_chat_apply_template)
 * in C: family detection by the same substrings in the same order, so a
 * template llama.cpp files under one family is never rendered as another,
 * and each family's formatting. */
#include "chat_template.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum family {
    F_UNKNOWN,
    F_CHATML, F_LLAMA2, F_LLAMA2_SYS, F_LLAMA2_SYS_BOS, F_LLAMA2_SYS_STRIP,
    F_MISTRAL_V1, F_MISTRAL_V3, F_MISTRAL_V3_TEKKEN, F_MISTRAL_V7, F_MISTRAL_V7_TEKKEN,
    F_PHI3, F_PHI4, F_FALCON3, F_ZEPHYR, F_MONARCH, F_GEMMA, F_ORION, F_OPENCHAT,
    F_VICUNA, F_VICUNA_ORCA, F_DEEPSEEK, F_DEEPSEEK2, F_DEEPSEEK3, F_DEEPSEEK_OCR,
    F_COMMAND_R, F_LLAMA3, F_CHATGLM3, F_CHATGLM4, F_GLMEDGE, F_MINICPM,
    F_EXAONE3, F_EXAONE4, F_EXAONE_MOE, F_RWKV_WORLD, F_GRANITE, F_GRANITE_40, F_GRANITE_41,
    F_MEGREZ, F_LLAMA4, F_SMOLVLM, F_DOTS1, F_HUNYUAN_MOE, F_GPT_OSS, F_KIMI_K2,
    F_SEED_OSS, F_GROK2, F_SOLAR_OPEN,
    /* known to llama.cpp, not rendered here */
    F_GIGACHAT, F_YANDEX, F_BAILING, F_BAILING_THINK, F_BAILING2, F_HUNYUAN_DENSE, F_HUNYUAN_VL,
    F_PANGU_EMBED,
    F_RENDERED_END = F_GIGACHAT,
};

/* llama.cpp's names (LLM_CHAT_TEMPLATES; dots1 has none there: detection only) */
static const struct {
    const char *name;
    enum family f;
} NAMES[] = {
    {"chatml", F_CHATML}, {"llama2", F_LLAMA2}, {"llama2-sys", F_LLAMA2_SYS},
    {"llama2-sys-bos", F_LLAMA2_SYS_BOS}, {"llama2-sys-strip", F_LLAMA2_SYS_STRIP},
    {"mistral-v1", F_MISTRAL_V1}, {"mistral-v3", F_MISTRAL_V3}, {"mistral-v3-tekken", F_MISTRAL_V3_TEKKEN},
    {"mistral-v7", F_MISTRAL_V7}, {"mistral-v7-tekken", F_MISTRAL_V7_TEKKEN}, {"phi3", F_PHI3},
    {"phi4", F_PHI4}, {"falcon3", F_FALCON3}, {"zephyr", F_ZEPHYR}, {"monarch", F_MONARCH},
    {"gemma", F_GEMMA}, {"orion", F_ORION}, {"openchat", F_OPENCHAT}, {"vicuna", F_VICUNA},
    {"vicuna-orca", F_VICUNA_ORCA}, {"deepseek", F_DEEPSEEK}, {"deepseek2", F_DEEPSEEK2},
    {"deepseek3", F_DEEPSEEK3}, {"deepseek-ocr", F_DEEPSEEK_OCR}, {"command-r", F_COMMAND_R},
    {"llama3", F_LLAMA3}, {"chatglm3", F_CHATGLM3}, {"chatglm4", F_CHATGLM4}, {"glmedge", F_GLMEDGE},
    {"minicpm", F_MINICPM}, {"exaone3", F_EXAONE3}, {"exaone4", F_EXAONE4}, {"exaone-moe", F_EXAONE_MOE},
    {"rwkv-world", F_RWKV_WORLD}, {"granite", F_GRANITE}, {"granite-4.0", F_GRANITE_40},
    {"granite-4.1", F_GRANITE_41}, {"gigachat", F_GIGACHAT}, {"megrez", F_MEGREZ}, {"yandex", F_YANDEX},
    {"bailing", F_BAILING}, {"bailing-think", F_BAILING_THINK}, {"bailing2", F_BAILING2},
    {"llama4", F_LLAMA4}, {"smolvlm", F_SMOLVLM}, {"hunyuan-moe", F_HUNYUAN_MOE}, {"gpt-oss", F_GPT_OSS},
    {"hunyuan-dense", F_HUNYUAN_DENSE}, {"hunyuan-vl", F_HUNYUAN_VL}, {"kimi-k2", F_KIMI_K2},
    {"seed_oss", F_SEED_OSS}, {"grok-2", F_GROK2}, {"pangu-embedded", F_PANGU_EMBED},
    {"solar-open", F_SOLAR_OPEN}, {"dots1", F_DOTS1},
};

static const char *family_name(enum family f)
{
    for (size_t i = 0; i < sizeof(NAMES) / sizeof(NAMES[0]); i++)
        if (NAMES[i].f == f)
            return NAMES[i].name;
    return "unknown";
}

/* llm_chat_detect_template: a name first, then substrings in llama.cpp's
 * order (an earlier test wins: phi4 is chatml's <|im_start|> plus <|im_sep|>) */
static enum family detect(const char *t)
{
    for (size_t i = 0; i < sizeof(NAMES) / sizeof(NAMES[0]); i++)
        if (NAMES[i].f != F_DOTS1 && !strcmp(t, NAMES[i].name))
            return NAMES[i].f;
#define HAS(s) (strstr(t, (s)) != NULL)
    if (HAS("<|im_start|>"))
        return HAS("<|im_sep|>") ? F_PHI4 : HAS("<end_of_utterance>") ? F_SMOLVLM : F_CHATML;
    if (!strncmp(t, "mistral", 7) || HAS("[INST]")) {
        if (HAS("[SYSTEM_PROMPT]"))
            return F_MISTRAL_V7;
        if (HAS("' [INST] ' + system_message") || HAS("[AVAILABLE_TOOLS]")) {
            if (HAS(" [INST]"))
                return F_MISTRAL_V1;
            if (HAS("\"[INST]\""))
                return F_MISTRAL_V3_TEKKEN;
            return F_MISTRAL_V3;
        }
        if (HAS("content.strip()"))
            return F_LLAMA2_SYS_STRIP;
        if (HAS("bos_token + '[INST]"))
            return F_LLAMA2_SYS_BOS;
        return HAS("<<SYS>>") ? F_LLAMA2_SYS : F_LLAMA2;
    }
    if (HAS("<|assistant|>") && HAS("<|end|>"))
        return F_PHI3;
    if (HAS("[gMASK]<sop>"))
        return F_CHATGLM4;
    if (HAS("<|assistant|>") && HAS("<|user|>")) {
        if (HAS("<|tool_declare|>"))
            return F_EXAONE_MOE;
        return HAS("</s>") ? F_FALCON3 : F_GLMEDGE;
    }
    if (HAS("<|{{ item['role'] }}|>") && HAS("<|begin_of_image|>"))
        return F_GLMEDGE;
    if (HAS("<|user|>") && HAS("<|endoftext|>"))
        return F_ZEPHYR;
    if (HAS("bos_token + message['role']"))
        return F_MONARCH;
    if (HAS("<start_of_turn>"))
        return F_GEMMA;
    if (HAS("'\\n\\nAssistant: ' + eos_token"))
        return F_ORION;
    if (HAS("GPT4 Correct "))
        return F_OPENCHAT;
    if (HAS("USER: ") && HAS("ASSISTANT: "))
        return HAS("SYSTEM: ") ? F_VICUNA_ORCA : F_VICUNA;
    if (HAS("### Instruction:") && HAS("<|EOT|>"))
        return F_DEEPSEEK;
    if (HAS("<|START_OF_TURN_TOKEN|>") && HAS("<|USER_TOKEN|>"))
        return F_COMMAND_R;
    if (HAS("<|start_header_id|>") && HAS("<|end_header_id|>"))
        return F_LLAMA3;
    if (HAS("[gMASK]sop"))
        return F_CHATGLM3;
    if (HAS("<\xe7\x94\xa8\xe6\x88\xb7>")) /* <用户> */
        return F_MINICPM;
    if (HAS("'Assistant: ' + message['content'] + eos_token"))
        return F_DEEPSEEK2;
    if (HAS("<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>") && HAS("<\xef\xbd\x9c" "User\xef\xbd\x9c>") &&
        HAS("<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>")) /* <｜...｜>, ▁ */
        return F_DEEPSEEK3;
    if (HAS("[|system|]") && HAS("[|assistant|]") && HAS("[|endofturn|]"))
        return HAS("[|tool|]") ? F_EXAONE4 : F_EXAONE3;
    if (HAS("rwkv-world") || HAS("{{- 'User: ' + message['content']|trim + '\\n\\n' -}}"))
        return F_RWKV_WORLD;
    if (HAS("<|start_of_role|>")) {
        if (HAS("<tool_call>") || HAS("<tools>"))
            return HAS("g4_default_system_message") ? F_GRANITE_40 : F_GRANITE_41;
        return F_GRANITE;
    }
    if (HAS("message['role'] + additional_special_tokens[0] + message['content'] + additional_special_tokens[1]"))
        return F_GIGACHAT;
    if (HAS("<|role_start|>"))
        return F_MEGREZ;
    if (HAS(" \xd0\x90\xd1\x81\xd1\x81\xd0\xb8\xd1\x81\xd1\x82\xd0\xb5\xd0\xbd\xd1\x82:")) /* " Ассистент:" */
        return F_YANDEX;
    if (HAS("<role>ASSISTANT</role>") && HAS("'HUMAN'"))
        return F_BAILING;
    if (HAS("<role>ASSISTANT</role>") && HAS("\"HUMAN\"") && HAS("<think>"))
        return F_BAILING_THINK;
    if (HAS("<role>ASSISTANT</role>") && HAS("<role>HUMAN</role>") && HAS("<|role_end|>"))
        return F_BAILING2;
    if (HAS("<|header_start|>") && HAS("<|header_end|>"))
        return F_LLAMA4;
    if (HAS("<|endofuserprompt|>"))
        return F_DOTS1;
    if (HAS("<|extra_0|>") && HAS("<|extra_4|>"))
        return F_HUNYUAN_MOE;
    if (HAS("<|start|>") && HAS("<|channel|>"))
        return F_GPT_OSS;
    if (HAS("<\xef\xbd\x9chy_Assistant\xef\xbd\x9c>") &&
        HAS("<\xef\xbd\x9chy_begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"))
        return F_HUNYUAN_VL;
    if (HAS("<\xef\xbd\x9chy_Assistant\xef\xbd\x9c>") &&
        HAS("<\xef\xbd\x9chy_place\xe2\x96\x81holder\xe2\x96\x81no\xe2\x96\x81" "3\xef\xbd\x9c>"))
        return F_HUNYUAN_DENSE;
    if (HAS("<|im_assistant|>assistant<|im_middle|>"))
        return F_KIMI_K2;
    if (HAS("<seed:bos>"))
        return F_SEED_OSS;
    if (HAS("'Assistant: '  + message['content'] + '<|separator|>"))
        return F_GROK2;
    if (HAS("[unused9]\xe7\xb3\xbb\xe7\xbb\x9f\xef\xbc\x9a[unused10]")) /* [unused9]系统：[unused10] */
        return F_PANGU_EMBED;
    if (HAS("<|begin|>") && HAS("<|end|>") && HAS("<|content|>"))
        return F_SOLAR_OPEN;
#undef HAS
    return F_UNKNOWN;
}

static int detect_checked(const char *tmpl, enum family *f, char *err, size_t errlen)
{
    *f = detect(tmpl);
    if (*f == F_UNKNOWN) {
        snprintf(err, errlen, "chat template not recognised (none of llama.cpp's built-in families; "
                              "kvfs runs no Jinja): give one by name with --chat-template");
        return -ENOENT;
    }
    if (*f >= F_RENDERED_END) {
        snprintf(err, errlen, "chat template is llama.cpp's '%s', which kvfs does not render", family_name(*f));
        return -ENOTSUP;
    }
    return 0;
}

int kvfs_chat_detect(const char *tmpl, const char **name, char *err, size_t errlen)
{
    enum family f;
    int rc = detect_checked(tmpl, &f, err, errlen);
    *name = family_name(f);
    return rc;
}

/* ---- growing string ---- */

struct sb {
    char *p;
    size_t len, cap;
    int oom;
};

static void put_n(struct sb *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void put(struct sb *b, const char *s) { put_n(b, s, strlen(s)); }

/* llama.cpp's trim(): ASCII whitespace at both ends */
static void put_trim(struct sb *b, const char *s)
{
    size_t i = 0, j = strlen(s);
    while (i < j && isspace((unsigned char)s[i]))
        i++;
    while (j > i && isspace((unsigned char)s[j - 1]))
        j--;
    put_n(b, s + i, j - i);
}

static int is(const char *role, const char *r) { return !strcmp(role, r); }

/* ---- formats (llm_chat_apply_template) ---- */

static void mistral_v1_v3(struct sb *b, enum family f, const struct kvfs_chat_msg *m, size_t n)
{
    const char *lead = f == F_MISTRAL_V1 ? " " : "", *trail = f == F_MISTRAL_V3_TEKKEN ? "" : " ";
    int inside = 0;
    for (size_t i = 0; i < n; i++) {
        if (!inside) {
            put(b, lead), put(b, "[INST]"), put(b, trail);
            inside = 1;
        }
        if (is(m[i].role, "system")) {
            put(b, m[i].content), put(b, "\n\n");
        } else if (is(m[i].role, "user")) {
            put(b, m[i].content), put(b, lead), put(b, "[/INST]");
        } else {
            put(b, trail);
            (f == F_MISTRAL_V3 ? put_trim : put)(b, m[i].content);
            put(b, "</s>");
            inside = 0;
        }
    }
}

static void llama2(struct sb *b, enum family f, const struct kvfs_chat_msg *m, size_t n)
{
    int inside = 1; /* the first [INST] is written up front */
    put(b, "[INST] ");
    for (size_t i = 0; i < n; i++) {
        void (*content)(struct sb *, const char *) = f == F_LLAMA2_SYS_STRIP ? put_trim : put;
        if (!inside) {
            inside = 1;
            put(b, f == F_LLAMA2_SYS_BOS ? "<s>[INST] " : "[INST] ");
        }
        if (is(m[i].role, "system")) {
            if (f != F_LLAMA2) {
                put(b, "<<SYS>>\n"), content(b, m[i].content), put(b, "\n<</SYS>>\n\n");
            } else { /* no system turn: its text leads the first message */
                content(b, m[i].content), put(b, "\n");
            }
        } else if (is(m[i].role, "user")) {
            content(b, m[i].content), put(b, " [/INST]");
        } else {
            content(b, m[i].content), put(b, "</s>");
            inside = 0;
        }
    }
}

/* Gemma has no system turn: its text, trimmed, opens the next user turn */
static void gemma(struct sb *b, const struct kvfs_chat_msg *m, size_t n, int add_ass)
{
    struct sb sys = {0};
    for (size_t i = 0; i < n; i++) {
        if (is(m[i].role, "system")) {
            put_trim(&sys, m[i].content);
            continue;
        }
        const char *role = is(m[i].role, "assistant") ? "model" : m[i].role;
        put(b, "<start_of_turn>"), put(b, role), put(b, "\n");
        if (sys.len && !is(role, "model")) {
            put_n(b, sys.p, sys.len), put(b, "\n\n");
            sys.len = 0;
        }
        put_trim(b, m[i].content), put(b, "<end_of_turn>\n");
    }
    b->oom |= sys.oom;
    free(sys.p);
    if (add_ass)
        put(b, "<start_of_turn>model\n");
}

static void orion(struct sb *b, const struct kvfs_chat_msg *m, size_t n)
{
    struct sb sys = {0};
    for (size_t i = 0; i < n; i++) {
        if (is(m[i].role, "system")) {
            put(&sys, m[i].content);
        } else if (is(m[i].role, "user")) {
            put(b, "Human: ");
            if (sys.len) {
                put_n(b, sys.p, sys.len), put(b, "\n\n");
                sys.len = 0;
            }
            put(b, m[i].content), put(b, "\n\nAssistant: </s>");
        } else {
            put(b, m[i].content), put(b, "</s>");
        }
    }
    b->oom |= sys.oom;
    free(sys.p);
}

/* Formats of one shape: prefix by role, the content (trimmed or not), suffix
 * by role; roles a format does not name get the "other" entry, or nothing
 * when that is NULL (llama.cpp writes nothing for them). */
struct shape {
    enum family f;
    const char *head;                        /* once, before the messages */
    const char *pre[4], *post[4];            /* system, user, assistant, other ("%r" = the role) */
    unsigned trim;                           /* bit per role */
    const char *gen;                         /* the generation prompt */
};

#define ROLE_BITS(s, u, a, o) ((s) | (u) << 1 | (a) << 2 | (o) << 3)
static const struct shape SHAPES[] = {
    {F_CHATML, NULL, {"<|im_start|>%r\n", "<|im_start|>%r\n", "<|im_start|>%r\n", "<|im_start|>%r\n"},
     {"<|im_end|>\n", "<|im_end|>\n", "<|im_end|>\n", "<|im_end|>\n"}, 0, "<|im_start|>assistant\n"},
    {F_PHI3, NULL, {"<|%r|>\n", "<|%r|>\n", "<|%r|>\n", "<|%r|>\n"},
     {"<|end|>\n", "<|end|>\n", "<|end|>\n", "<|end|>\n"}, 0, "<|assistant|>\n"},
    {F_PHI4, NULL, {"<|im_start|>%r<|im_sep|>", "<|im_start|>%r<|im_sep|>", "<|im_start|>%r<|im_sep|>",
                    "<|im_start|>%r<|im_sep|>"},
     {"<|im_end|>", "<|im_end|>", "<|im_end|>", "<|im_end|>"}, 0, "<|im_start|>assistant<|im_sep|>"},
    {F_FALCON3, NULL, {"<|%r|>\n", "<|%r|>\n", "<|%r|>\n", "<|%r|>\n"}, {"\n", "\n", "\n", "\n"}, 0,
     "<|assistant|>\n"},
    {F_ZEPHYR, NULL, {"<|%r|>\n", "<|%r|>\n", "<|%r|>\n", "<|%r|>\n"},
     {"<|endoftext|>\n", "<|endoftext|>\n", "<|endoftext|>\n", "<|endoftext|>\n"}, 0, "<|assistant|>\n"},
    {F_VICUNA, NULL, {"", "USER: ", "ASSISTANT: ", NULL}, {"\n\n", "\n", "</s>\n", NULL}, 0, "ASSISTANT:"},
    {F_VICUNA_ORCA, NULL, {"SYSTEM: ", "USER: ", "ASSISTANT: ", NULL}, {"\n", "\n", "</s>\n", NULL}, 0,
     "ASSISTANT:"},
    {F_DEEPSEEK, NULL, {"", "### Instruction:\n", "### Response:\n", NULL}, {"", "\n", "\n<|EOT|>\n", NULL}, 0,
     "### Response:\n"},
    {F_COMMAND_R, NULL,
     {"<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>", "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>",
      "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", NULL},
     {"<|END_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", NULL}, ROLE_BITS(1, 1, 1, 0),
     "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"},
    {F_LLAMA3, NULL,
     {"<|start_header_id|>%r<|end_header_id|>\n\n", "<|start_header_id|>%r<|end_header_id|>\n\n",
      "<|start_header_id|>%r<|end_header_id|>\n\n", "<|start_header_id|>%r<|end_header_id|>\n\n"},
     {"<|eot_id|>", "<|eot_id|>", "<|eot_id|>", "<|eot_id|>"}, ROLE_BITS(1, 1, 1, 1),
     "<|start_header_id|>assistant<|end_header_id|>\n\n"},
    {F_CHATGLM3, "[gMASK]sop", {"<|%r|>\n ", "<|%r|>\n ", "<|%r|>\n ", "<|%r|>\n "}, {"", "", "", ""}, 0,
     "<|assistant|>"},
    {F_CHATGLM4, "[gMASK]<sop>", {"<|%r|>\n", "<|%r|>\n", "<|%r|>\n", "<|%r|>\n"}, {"", "", "", ""}, 0,
     "<|assistant|>\n"},
    {F_GLMEDGE, NULL, {"<|%r|>\n", "<|%r|>\n", "<|%r|>\n", "<|%r|>\n"}, {"", "", "", ""}, 0, "<|assistant|>"},
    {F_MINICPM, NULL, {"", "<\xe7\x94\xa8\xe6\x88\xb7>", "", ""}, {"", "<AI>", "", ""}, ROLE_BITS(1, 1, 1, 1),
     NULL},
    {F_DEEPSEEK2, NULL, {"", "User: ", "Assistant: ", NULL},
     {"\n\n", "\n\n", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", NULL}, 0, "Assistant:"},
    {F_DEEPSEEK3, NULL, {"", "<\xef\xbd\x9cUser\xef\xbd\x9c>", "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>", NULL},
     {"\n\n", "", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", NULL}, 0,
     "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"},
    {F_DEEPSEEK_OCR, NULL, {"", "", "", ""}, {"", "", "", ""}, 0, NULL},
    {F_EXAONE3, NULL, {"[|system|]", "[|user|]", "[|assistant|]", NULL},
     {"[|endofturn|]\n", "\n", "[|endofturn|]\n", NULL}, ROLE_BITS(1, 1, 1, 0), "[|assistant|]"},
    {F_MEGREZ, NULL,
     {"<|role_start|>%r<|role_end|>", "<|role_start|>%r<|role_end|>", "<|role_start|>%r<|role_end|>",
      "<|role_start|>%r<|role_end|>"},
     {"<|turn_end|>", "<|turn_end|>", "<|turn_end|>", "<|turn_end|>"}, 0, "<|role_start|>assistant<|role_end|>"},
    {F_LLAMA4, NULL,
     {"<|header_start|>%r<|header_end|>\n\n", "<|header_start|>%r<|header_end|>\n\n",
      "<|header_start|>%r<|header_end|>\n\n", "<|header_start|>%r<|header_end|>\n\n"},
     {"<|eot|>", "<|eot|>", "<|eot|>", "<|eot|>"}, ROLE_BITS(1, 1, 1, 1),
     "<|header_start|>assistant<|header_end|>\n\n"},
    {F_SMOLVLM, "<|im_start|>", {"", "User: ", "Assistant: ", "Assistant: "},
     {"\n\n", "<end_of_utterance>\n", "<end_of_utterance>\n", "<end_of_utterance>\n"}, 0, "Assistant:"},
    {F_DOTS1, NULL, {"<|system|>", "<|userprompt|>", "<|response|>", "<|response|>"},
     {"<|endofsystem|>", "<|endofuserprompt|>", "<|endofresponse|>", "<|endofresponse|>"}, 0, "<|response|>"},
    {F_HUNYUAN_MOE, NULL, {"<|startoftext|>", "<|startoftext|>", "", "<|startoftext|>"},
     {"<|extra_4|>", "<|extra_0|>", "<|eos|>", "<|extra_0|>"}, 0, NULL},
    {F_GPT_OSS, NULL,
     {"<|start|>%r<|message|>", "<|start|>%r<|message|>", "<|start|>%r<|message|>", "<|start|>%r<|message|>"},
     {"<|end|>", "<|end|>", "<|return|>", "<|end|>"}, 0, "<|start|>assistant"},
    {F_SEED_OSS, NULL, {"<seed:bos>%r\n", "<seed:bos>%r\n", "<seed:bos>%r\n", "<seed:bos>%r\n"},
     {"<seed:eos>", "<seed:eos>", "<seed:eos>", "<seed:eos>"}, ROLE_BITS(0, 0, 1, 0), "<seed:bos>assistant\n"},
    {F_GROK2, NULL, {"System: ", "Human: ", "Assistant: ", NULL},
     {"<|separator|>\n\n", "<|separator|>\n\n", "<|separator|>\n\n", NULL}, ROLE_BITS(1, 1, 0, 0), "Assistant:"},
    {F_SOLAR_OPEN, NULL,
     {"<|begin|>%r<|content|>", "<|begin|>%r<|content|>", "<|begin|>%r<|content|>", "<|begin|>%r<|content|>"},
     {"<|end|>", "<|end|>", "<|end|>", "<|end|>"}, 0, "<|begin|>assistant"},
};

/* a piece with "%r" standing for the role */
static void put_role_piece(struct sb *b, const char *piece, const char *role)
{
    const char *r = strstr(piece, "%r");
    if (!r) {
        put(b, piece);
        return;
    }
    put_n(b, piece, (size_t)(r - piece)), put(b, role), put(b, r + 2);
}

static void shaped(struct sb *b, const struct shape *s, const struct kvfs_chat_msg *m, size_t n, int add_ass)
{
    if (s->head)
        put(b, s->head);
    for (size_t i = 0; i < n; i++) {
        int k = is(m[i].role, "system") ? 0 : is(m[i].role, "user") ? 1 : is(m[i].role, "assistant") ? 2 : 3;
        if (!s->pre[k])
            continue;
        put_role_piece(b, s->pre[k], m[i].role);
        (s->trim >> k & 1 ? put_trim : put)(b, m[i].content);
        put(b, s->post[k]);
    }
    if (add_ass && s->gen)
        put(b, s->gen);
}

static void render(struct sb *b, enum family f, const struct kvfs_chat_msg *m, size_t n, int add_ass)
{
    for (size_t i = 0; i < sizeof(SHAPES) / sizeof(SHAPES[0]); i++)
        if (SHAPES[i].f == f) {
            shaped(b, &SHAPES[i], m, n, add_ass);
            return;
        }
    switch (f) {
    case F_MISTRAL_V7:
    case F_MISTRAL_V7_TEKKEN: {
        const char *sp = f == F_MISTRAL_V7 ? " " : "";
        for (size_t i = 0; i < n; i++) {
            if (is(m[i].role, "system"))
                put(b, "[SYSTEM_PROMPT]"), put(b, sp), put(b, m[i].content), put(b, "[/SYSTEM_PROMPT]");
            else if (is(m[i].role, "user"))
                put(b, "[INST]"), put(b, sp), put(b, m[i].content), put(b, "[/INST]");
            else
                put(b, sp), put(b, m[i].content), put(b, "</s>");
        }
        break; /* no generation prompt: the model answers after [/INST] */
    }
    case F_MISTRAL_V1:
    case F_MISTRAL_V3:
    case F_MISTRAL_V3_TEKKEN:
        mistral_v1_v3(b, f, m, n);
        break;
    case F_LLAMA2:
    case F_LLAMA2_SYS:
    case F_LLAMA2_SYS_BOS:
    case F_LLAMA2_SYS_STRIP:
        llama2(b, f, m, n);
        break;
    case F_GEMMA:
        gemma(b, m, n, add_ass);
        break;
    case F_ORION:
        orion(b, m, n);
        break;
    case F_MONARCH: /* the <s> of every message but the first is in the text */
        for (size_t i = 0; i < n; i++)
            put(b, i ? "<s>" : ""), put(b, m[i].role), put(b, "\n"), put(b, m[i].content), put(b, "</s>\n");
        if (add_ass)
            put(b, "<s>assistant\n");
        break;
    case F_OPENCHAT:
        for (size_t i = 0; i < n; i++) {
            if (is(m[i].role, "system")) {
                put(b, m[i].content), put(b, "<|end_of_turn|>");
                continue;
            }
            char c = (char)toupper((unsigned char)m[i].role[0]);
            put(b, "GPT4 Correct "), put_n(b, &c, m[i].role[0] ? 1 : 0), put(b, m[i].role[0] ? m[i].role + 1 : "");
            put(b, ": "), put(b, m[i].content), put(b, "<|end_of_turn|>");
        }
        if (add_ass)
            put(b, "GPT4 Correct Assistant:");
        break;
    case F_EXAONE4: /* a tool turn too, which the shape table cannot say */
    case F_EXAONE_MOE: {
        static const char *const roles[] = {"system", "user", "assistant", "tool"};
        static const char *const pre4[] = {"[|system|]", "[|user|]", "[|assistant|]", "[|tool|]"};
        static const char *const pre_moe[] = {"<|system|>\n", "<|user|>\n", "<|assistant|>\n", "<|tool|>\n"};
        for (size_t i = 0; i < n; i++)
            for (int k = 0; k < 4; k++) {
                if (!is(m[i].role, roles[k]))
                    continue;
                put(b, f == F_EXAONE4 ? pre4[k] : pre_moe[k]), put_trim(b, m[i].content);
                put(b, f == F_EXAONE_MOE ? "<|endofturn|>\n" : k == 1 ? "\n" : "[|endofturn|]\n");
            }
        if (add_ass)
            put(b, f == F_EXAONE4 ? "[|assistant|]" : "<|assistant|>\n");
        break;
    }
    case F_RWKV_WORLD: /* the generation prompt follows a last user turn whatever add_ass says */
        for (size_t i = 0; i < n; i++) {
            const char *r = m[i].role;
            if (is(r, "system"))
                put(b, "System: "), put_trim(b, m[i].content), put(b, "\n\n");
            else if (is(r, "user"))
                put(b, "User: "), put_trim(b, m[i].content), put(b, i + 1 == n ? "\n\nAssistant:" : "\n\n");
            else if (is(r, "assistant"))
                put(b, "Assistant: "), put_trim(b, m[i].content), put(b, "\n\n");
        }
        break;
    case F_GRANITE: /* 3.x: <|tool_call|> after the role assistant_tool_call */
    case F_GRANITE_40:
    case F_GRANITE_41: /* 4.x: an assistant turn opening with <|tool_call|> */
        for (size_t i = 0; i < n; i++) {
            if (f == F_GRANITE && is(m[i].role, "assistant_tool_call"))
                put(b, "<|start_of_role|>assistant_tool_call<|end_of_role|><|tool_call|>");
            else if (is(m[i].role, "assistant_tool_call"))
                put(b, "<|start_of_role|>assistant<|end_of_role|><|tool_call|>");
            else
                put(b, "<|start_of_role|>"), put(b, m[i].role), put(b, "<|end_of_role|>");
            put(b, m[i].content), put(b, "<|end_of_text|>\n");
        }
        if (add_ass)
            put(b, "<|start_of_role|>assistant<|end_of_role|>");
        break;
    case F_KIMI_K2:
        for (size_t i = 0; i < n; i++) {
            const char *r = m[i].role;
            put(b, is(r, "system") ? "<|im_system|>system<|im_middle|>" : is(r, "user") ? "<|im_user|>user<|im_middle|>"
                 : is(r, "assistant") ? "<|im_assistant|>assistant<|im_middle|>"
                 : is(r, "tool") ? "<|im_system|>tool<|im_middle|>" : "");
            put(b, m[i].content), put(b, "<|im_end|>");
        }
        if (add_ass)
            put(b, "<|im_assistant|>assistant<|im_middle|>");
        break;
    default:
        break;
    }
}

/* The literal default system message a chatml template writes when the
 * conversation opens with no system turn, as '<|im_start|>system\nTEXT<|im_end|>
 * in one quoted Jinja string (SmolLM2, Qwen2, Qwen2.5).  *sys = NULL: none. */
static int chatml_default_system(const char *tmpl, char **sys)
{
    *sys = NULL;
    static const char open[] = "<|im_start|>system";
    for (const char *p = strstr(tmpl, open); p; p = strstr(p + 1, open)) {
        if (p == tmpl || (p[-1] != '\'' && p[-1] != '"'))
            continue;
        char q = p[-1];
        const char *s = p + sizeof(open) - 1;
        if (*s == '\n')
            s++;
        else if (s[0] == '\\' && s[1] == 'n')
            s += 2;
        else
            continue;
        const char *end = strstr(s, "<|im_end|>"), *e = s;
        while (end && e < end && *e != q) /* the closing quote, escapes skipped */
            e += e[0] == '\\' && e + 1 < end ? 2 : 1;
        if (!end || end == s || e < end)
            continue; /* '<|im_start|>system\n' + the message's content: not a default */
        struct sb b = {0};
        for (const char *c = s; c < end; c++) {
            if (c[0] == '\\' && c + 1 < end) { /* Jinja string escapes */
                c++;
                char e = *c == 'n' ? '\n' : *c == 't' ? '\t' : *c;
                put_n(&b, &e, 1);
            } else {
                put_n(&b, c, 1);
            }
        }
        if (b.oom) {
            free(b.p);
            return -ENOMEM;
        }
        *sys = b.p;
        return 0;
    }
    return 0;
}

int kvfs_chat_render(const char *tmpl, const struct kvfs_chat_msg *msgs, size_t n, int add_ass, char **out,
                     char *err, size_t errlen)
{
    enum family f;
    int rc = detect_checked(tmpl, &f, err, errlen);
    if (rc)
        return rc;
    char *sys = NULL;
    struct kvfs_chat_msg *all = NULL;
    if (f == F_CHATML && (n == 0 || !is(msgs[0].role, "system"))) {
        if ((rc = chatml_default_system(tmpl, &sys)))
            goto out;
        if (sys) {
            if (!(all = malloc(sizeof(*all) * (n + 1)))) {
                rc = -ENOMEM;
                goto out;
            }
            all[0] = (struct kvfs_chat_msg){"system", sys};
            memcpy(all + 1, msgs, sizeof(*all) * n);
            msgs = all;
            n++;
        }
    }
    struct sb b = {0};
    put(&b, ""); /* an empty conversation still gives a string */
    render(&b, f, msgs, n, add_ass);
    if (b.oom) {
        free(b.p);
        rc = -ENOMEM;
        goto out;
    }
    *out = b.p;
out:
    if (rc == -ENOMEM)
        snprintf(err, errlen, "out of memory");
    free(all);
    free(sys);
    return rc;
}
