/* test_chat_template.c - chat_template.c against renderings of libllama's
 * llama_chat_apply_template (llama-cpp-python 0.3.36) of a multi-turn
 * conversation (system, user, assistant, user, assistant_tool_call, tool)
 * in every family kvfs renders (dots1 by its detection: llama.cpp has no
 * name for it), with and without the generation prompt: the turns the
 * kvfsctl commands (system, user) do not reach; and the
 * detection's refusals and chatml's default system message.
 * tests/oracle/chat_template.sh checks the same against llama.cpp live. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "check.h"

static const struct {
    const char *tmpl;
    int add_ass;
    const char *want;
} CASES[] = {
    {"chatglm3", 1, "[gMASK]sop<|system|>\n  Be terse. <|user|>\n Hi there<|assistant|>\n  Hello! <|user|>\n Capital of France?\n<|assistant_tool_call|>\n x<|tool|>\n y<|assistant|>"},
    {"chatglm3", 0, "[gMASK]sop<|system|>\n  Be terse. <|user|>\n Hi there<|assistant|>\n  Hello! <|user|>\n Capital of France?\n<|assistant_tool_call|>\n x<|tool|>\n y"},
    {"chatglm4", 1, "[gMASK]<sop><|system|>\n Be terse. <|user|>\nHi there<|assistant|>\n Hello! <|user|>\nCapital of France?\n<|assistant_tool_call|>\nx<|tool|>\ny<|assistant|>\n"},
    {"chatglm4", 0, "[gMASK]<sop><|system|>\n Be terse. <|user|>\nHi there<|assistant|>\n Hello! <|user|>\nCapital of France?\n<|assistant_tool_call|>\nx<|tool|>\ny"},
    {"chatml", 1, "<|im_start|>system\n Be terse. <|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n Hello! <|im_end|>\n<|im_start|>user\nCapital of France?\n<|im_end|>\n<|im_start|>assistant_tool_call\nx<|im_end|>\n<|im_start|>tool\ny<|im_end|>\n<|im_start|>assistant\n"},
    {"chatml", 0, "<|im_start|>system\n Be terse. <|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n Hello! <|im_end|>\n<|im_start|>user\nCapital of France?\n<|im_end|>\n<|im_start|>assistant_tool_call\nx<|im_end|>\n<|im_start|>tool\ny<|im_end|>\n"},
    {"command-r", 1, "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>Be terse.<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>Hello!<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Capital of France?<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"},
    {"command-r", 0, "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>Be terse.<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>Hello!<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Capital of France?<|END_OF_TURN_TOKEN|>"},
    {"deepseek", 1, " Be terse. ### Instruction:\nHi there\n### Response:\n Hello! \n<|EOT|>\n### Instruction:\nCapital of France?\n\n### Response:\n"},
    {"deepseek", 0, " Be terse. ### Instruction:\nHi there\n### Response:\n Hello! \n<|EOT|>\n### Instruction:\nCapital of France?\n\n"},
    {"deepseek-ocr", 1, " Be terse. Hi there Hello! Capital of France?\nxy"},
    {"deepseek-ocr", 0, " Be terse. Hi there Hello! Capital of France?\nxy"},
    {"deepseek2", 1, " Be terse. \n\nUser: Hi there\n\nAssistant:  Hello! <\xef""\xbd""\x9c""end\xe2""\x96""\x81""of\xe2""\x96""\x81""sentence\xef""\xbd""\x9c"">User: Capital of France?\n\n\nAssistant:"},
    {"deepseek2", 0, " Be terse. \n\nUser: Hi there\n\nAssistant:  Hello! <\xef""\xbd""\x9c""end\xe2""\x96""\x81""of\xe2""\x96""\x81""sentence\xef""\xbd""\x9c"">User: Capital of France?\n\n\n"},
    {"deepseek3", 1, " Be terse. \n\n<\xef""\xbd""\x9c""User\xef""\xbd""\x9c"">Hi there<\xef""\xbd""\x9c""Assistant\xef""\xbd""\x9c""> Hello! <\xef""\xbd""\x9c""end\xe2""\x96""\x81""of\xe2""\x96""\x81""sentence\xef""\xbd""\x9c""><\xef""\xbd""\x9c""User\xef""\xbd""\x9c"">Capital of France?\n<\xef""\xbd""\x9c""Assistant\xef""\xbd""\x9c"">"},
    {"deepseek3", 0, " Be terse. \n\n<\xef""\xbd""\x9c""User\xef""\xbd""\x9c"">Hi there<\xef""\xbd""\x9c""Assistant\xef""\xbd""\x9c""> Hello! <\xef""\xbd""\x9c""end\xe2""\x96""\x81""of\xe2""\x96""\x81""sentence\xef""\xbd""\x9c""><\xef""\xbd""\x9c""User\xef""\xbd""\x9c"">Capital of France?\n"},
    {"exaone-moe", 1, "<|system|>\nBe terse.<|endofturn|>\n<|user|>\nHi there<|endofturn|>\n<|assistant|>\nHello!<|endofturn|>\n<|user|>\nCapital of France?<|endofturn|>\n<|tool|>\ny<|endofturn|>\n<|assistant|>\n"},
    {"exaone-moe", 0, "<|system|>\nBe terse.<|endofturn|>\n<|user|>\nHi there<|endofturn|>\n<|assistant|>\nHello!<|endofturn|>\n<|user|>\nCapital of France?<|endofturn|>\n<|tool|>\ny<|endofturn|>\n"},
    {"exaone3", 1, "[|system|]Be terse.[|endofturn|]\n[|user|]Hi there\n[|assistant|]Hello![|endofturn|]\n[|user|]Capital of France?\n[|assistant|]"},
    {"exaone3", 0, "[|system|]Be terse.[|endofturn|]\n[|user|]Hi there\n[|assistant|]Hello![|endofturn|]\n[|user|]Capital of France?\n"},
    {"exaone4", 1, "[|system|]Be terse.[|endofturn|]\n[|user|]Hi there\n[|assistant|]Hello![|endofturn|]\n[|user|]Capital of France?\n[|tool|]y[|endofturn|]\n[|assistant|]"},
    {"exaone4", 0, "[|system|]Be terse.[|endofturn|]\n[|user|]Hi there\n[|assistant|]Hello![|endofturn|]\n[|user|]Capital of France?\n[|tool|]y[|endofturn|]\n"},
    {"falcon3", 1, "<|system|>\n Be terse. \n<|user|>\nHi there\n<|assistant|>\n Hello! \n<|user|>\nCapital of France?\n\n<|assistant_tool_call|>\nx\n<|tool|>\ny\n<|assistant|>\n"},
    {"falcon3", 0, "<|system|>\n Be terse. \n<|user|>\nHi there\n<|assistant|>\n Hello! \n<|user|>\nCapital of France?\n\n<|assistant_tool_call|>\nx\n<|tool|>\ny\n"},
    {"gemma", 1, "<start_of_turn>user\nBe terse.\n\nHi there<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n<start_of_turn>user\nCapital of France?<end_of_turn>\n<start_of_turn>assistant_tool_call\nx<end_of_turn>\n<start_of_turn>tool\ny<end_of_turn>\n<start_of_turn>model\n"},
    {"gemma", 0, "<start_of_turn>user\nBe terse.\n\nHi there<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n<start_of_turn>user\nCapital of France?<end_of_turn>\n<start_of_turn>assistant_tool_call\nx<end_of_turn>\n<start_of_turn>tool\ny<end_of_turn>\n"},
    {"glmedge", 1, "<|system|>\n Be terse. <|user|>\nHi there<|assistant|>\n Hello! <|user|>\nCapital of France?\n<|assistant_tool_call|>\nx<|tool|>\ny<|assistant|>"},
    {"glmedge", 0, "<|system|>\n Be terse. <|user|>\nHi there<|assistant|>\n Hello! <|user|>\nCapital of France?\n<|assistant_tool_call|>\nx<|tool|>\ny"},
    {"gpt-oss", 1, "<|start|>system<|message|> Be terse. <|end|><|start|>user<|message|>Hi there<|end|><|start|>assistant<|message|> Hello! <|return|><|start|>user<|message|>Capital of France?\n<|end|><|start|>assistant_tool_call<|message|>x<|end|><|start|>tool<|message|>y<|end|><|start|>assistant"},
    {"gpt-oss", 0, "<|start|>system<|message|> Be terse. <|end|><|start|>user<|message|>Hi there<|end|><|start|>assistant<|message|> Hello! <|return|><|start|>user<|message|>Capital of France?\n<|end|><|start|>assistant_tool_call<|message|>x<|end|><|start|>tool<|message|>y<|end|>"},
    {"granite", 1, "<|start_of_role|>system<|end_of_role|> Be terse. <|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Hi there<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|> Hello! <|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Capital of France?\n<|end_of_text|>\n<|start_of_role|>assistant_tool_call<|end_of_role|><|tool_call|>x<|end_of_text|>\n<|start_of_role|>tool<|end_of_role|>y<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>"},
    {"granite", 0, "<|start_of_role|>system<|end_of_role|> Be terse. <|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Hi there<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|> Hello! <|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Capital of France?\n<|end_of_text|>\n<|start_of_role|>assistant_tool_call<|end_of_role|><|tool_call|>x<|end_of_text|>\n<|start_of_role|>tool<|end_of_role|>y<|end_of_text|>\n"},
    {"granite-4.0", 1, "<|start_of_role|>system<|end_of_role|> Be terse. <|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Hi there<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|> Hello! <|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Capital of France?\n<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|><|tool_call|>x<|end_of_text|>\n<|start_of_role|>tool<|end_of_role|>y<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>"},
    {"granite-4.0", 0, "<|start_of_role|>system<|end_of_role|> Be terse. <|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Hi there<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|> Hello! <|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Capital of France?\n<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|><|tool_call|>x<|end_of_text|>\n<|start_of_role|>tool<|end_of_role|>y<|end_of_text|>\n"},
    {"granite-4.1", 1, "<|start_of_role|>system<|end_of_role|> Be terse. <|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Hi there<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|> Hello! <|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Capital of France?\n<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|><|tool_call|>x<|end_of_text|>\n<|start_of_role|>tool<|end_of_role|>y<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>"},
    {"granite-4.1", 0, "<|start_of_role|>system<|end_of_role|> Be terse. <|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Hi there<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|> Hello! <|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Capital of France?\n<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|><|tool_call|>x<|end_of_text|>\n<|start_of_role|>tool<|end_of_role|>y<|end_of_text|>\n"},
    {"grok-2", 1, "System: Be terse.<|separator|>\n\nHuman: Hi there<|separator|>\n\nAssistant:  Hello! <|separator|>\n\nHuman: Capital of France?<|separator|>\n\nAssistant:"},
    {"grok-2", 0, "System: Be terse.<|separator|>\n\nHuman: Hi there<|separator|>\n\nAssistant:  Hello! <|separator|>\n\nHuman: Capital of France?<|separator|>\n\n"},
    {"hunyuan-moe", 1, "<|startoftext|> Be terse. <|extra_4|><|startoftext|>Hi there<|extra_0|> Hello! <|eos|><|startoftext|>Capital of France?\n<|extra_0|><|startoftext|>x<|extra_0|><|startoftext|>y<|extra_0|>"},
    {"hunyuan-moe", 0, "<|startoftext|> Be terse. <|extra_4|><|startoftext|>Hi there<|extra_0|> Hello! <|eos|><|startoftext|>Capital of France?\n<|extra_0|><|startoftext|>x<|extra_0|><|startoftext|>y<|extra_0|>"},
    {"kimi-k2", 1, "<|im_system|>system<|im_middle|> Be terse. <|im_end|><|im_user|>user<|im_middle|>Hi there<|im_end|><|im_assistant|>assistant<|im_middle|> Hello! <|im_end|><|im_user|>user<|im_middle|>Capital of France?\n<|im_end|>x<|im_end|><|im_system|>tool<|im_middle|>y<|im_end|><|im_assistant|>assistant<|im_middle|>"},
    {"kimi-k2", 0, "<|im_system|>system<|im_middle|> Be terse. <|im_end|><|im_user|>user<|im_middle|>Hi there<|im_end|><|im_assistant|>assistant<|im_middle|> Hello! <|im_end|><|im_user|>user<|im_middle|>Capital of France?\n<|im_end|>x<|im_end|><|im_system|>tool<|im_middle|>y<|im_end|>"},
    {"llama2", 1, "[INST]  Be terse. \nHi there [/INST] Hello! </s>[INST] Capital of France?\n [/INST]x</s>[INST] y</s>"},
    {"llama2", 0, "[INST]  Be terse. \nHi there [/INST] Hello! </s>[INST] Capital of France?\n [/INST]x</s>[INST] y</s>"},
    {"llama2-sys", 1, "[INST] <<SYS>>\n Be terse. \n<</SYS>>\n\nHi there [/INST] Hello! </s>[INST] Capital of France?\n [/INST]x</s>[INST] y</s>"},
    {"llama2-sys", 0, "[INST] <<SYS>>\n Be terse. \n<</SYS>>\n\nHi there [/INST] Hello! </s>[INST] Capital of France?\n [/INST]x</s>[INST] y</s>"},
    {"llama2-sys-bos", 1, "[INST] <<SYS>>\n Be terse. \n<</SYS>>\n\nHi there [/INST] Hello! </s><s>[INST] Capital of France?\n [/INST]x</s><s>[INST] y</s>"},
    {"llama2-sys-bos", 0, "[INST] <<SYS>>\n Be terse. \n<</SYS>>\n\nHi there [/INST] Hello! </s><s>[INST] Capital of France?\n [/INST]x</s><s>[INST] y</s>"},
    {"llama2-sys-strip", 1, "[INST] <<SYS>>\nBe terse.\n<</SYS>>\n\nHi there [/INST]Hello!</s>[INST] Capital of France? [/INST]x</s>[INST] y</s>"},
    {"llama2-sys-strip", 0, "[INST] <<SYS>>\nBe terse.\n<</SYS>>\n\nHi there [/INST]Hello!</s>[INST] Capital of France? [/INST]x</s>[INST] y</s>"},
    {"llama3", 1, "<|start_header_id|>system<|end_header_id|>\n\nBe terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nCapital of France?<|eot_id|><|start_header_id|>assistant_tool_call<|end_header_id|>\n\nx<|eot_id|><|start_header_id|>tool<|end_header_id|>\n\ny<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3", 0, "<|start_header_id|>system<|end_header_id|>\n\nBe terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nCapital of France?<|eot_id|><|start_header_id|>assistant_tool_call<|end_header_id|>\n\nx<|eot_id|><|start_header_id|>tool<|end_header_id|>\n\ny<|eot_id|>"},
    {"llama4", 1, "<|header_start|>system<|header_end|>\n\nBe terse.<|eot|><|header_start|>user<|header_end|>\n\nHi there<|eot|><|header_start|>assistant<|header_end|>\n\nHello!<|eot|><|header_start|>user<|header_end|>\n\nCapital of France?<|eot|><|header_start|>assistant_tool_call<|header_end|>\n\nx<|eot|><|header_start|>tool<|header_end|>\n\ny<|eot|><|header_start|>assistant<|header_end|>\n\n"},
    {"llama4", 0, "<|header_start|>system<|header_end|>\n\nBe terse.<|eot|><|header_start|>user<|header_end|>\n\nHi there<|eot|><|header_start|>assistant<|header_end|>\n\nHello!<|eot|><|header_start|>user<|header_end|>\n\nCapital of France?<|eot|><|header_start|>assistant_tool_call<|header_end|>\n\nx<|eot|><|header_start|>tool<|header_end|>\n\ny<|eot|>"},
    {"megrez", 1, "<|role_start|>system<|role_end|> Be terse. <|turn_end|><|role_start|>user<|role_end|>Hi there<|turn_end|><|role_start|>assistant<|role_end|> Hello! <|turn_end|><|role_start|>user<|role_end|>Capital of France?\n<|turn_end|><|role_start|>assistant_tool_call<|role_end|>x<|turn_end|><|role_start|>tool<|role_end|>y<|turn_end|><|role_start|>assistant<|role_end|>"},
    {"megrez", 0, "<|role_start|>system<|role_end|> Be terse. <|turn_end|><|role_start|>user<|role_end|>Hi there<|turn_end|><|role_start|>assistant<|role_end|> Hello! <|turn_end|><|role_start|>user<|role_end|>Capital of France?\n<|turn_end|><|role_start|>assistant_tool_call<|role_end|>x<|turn_end|><|role_start|>tool<|role_end|>y<|turn_end|>"},
    {"minicpm", 1, "Be terse.<\xe7""\x94""\xa8""\xe6""\x88""\xb7"">Hi there<AI>Hello!<\xe7""\x94""\xa8""\xe6""\x88""\xb7"">Capital of France?<AI>xy"},
    {"minicpm", 0, "Be terse.<\xe7""\x94""\xa8""\xe6""\x88""\xb7"">Hi there<AI>Hello!<\xe7""\x94""\xa8""\xe6""\x88""\xb7"">Capital of France?<AI>xy"},
    {"mistral-v1", 1, " [INST]  Be terse. \n\nHi there [/INST]  Hello! </s> [INST] Capital of France?\n [/INST] x</s> [INST]  y</s>"},
    {"mistral-v1", 0, " [INST]  Be terse. \n\nHi there [/INST]  Hello! </s> [INST] Capital of France?\n [/INST] x</s> [INST]  y</s>"},
    {"mistral-v3", 1, "[INST]  Be terse. \n\nHi there[/INST] Hello!</s>[INST] Capital of France?\n[/INST] x</s>[INST]  y</s>"},
    {"mistral-v3", 0, "[INST]  Be terse. \n\nHi there[/INST] Hello!</s>[INST] Capital of France?\n[/INST] x</s>[INST]  y</s>"},
    {"mistral-v3-tekken", 1, "[INST] Be terse. \n\nHi there[/INST] Hello! </s>[INST]Capital of France?\n[/INST]x</s>[INST]y</s>"},
    {"mistral-v3-tekken", 0, "[INST] Be terse. \n\nHi there[/INST] Hello! </s>[INST]Capital of France?\n[/INST]x</s>[INST]y</s>"},
    {"mistral-v7", 1, "[SYSTEM_PROMPT]  Be terse. [/SYSTEM_PROMPT][INST] Hi there[/INST]  Hello! </s>[INST] Capital of France?\n[/INST] x</s> y</s>"},
    {"mistral-v7", 0, "[SYSTEM_PROMPT]  Be terse. [/SYSTEM_PROMPT][INST] Hi there[/INST]  Hello! </s>[INST] Capital of France?\n[/INST] x</s> y</s>"},
    {"mistral-v7-tekken", 1, "[SYSTEM_PROMPT] Be terse. [/SYSTEM_PROMPT][INST]Hi there[/INST] Hello! </s>[INST]Capital of France?\n[/INST]x</s>y</s>"},
    {"mistral-v7-tekken", 0, "[SYSTEM_PROMPT] Be terse. [/SYSTEM_PROMPT][INST]Hi there[/INST] Hello! </s>[INST]Capital of France?\n[/INST]x</s>y</s>"},
    {"monarch", 1, "system\n Be terse. </s>\n<s>user\nHi there</s>\n<s>assistant\n Hello! </s>\n<s>user\nCapital of France?\n</s>\n<s>assistant_tool_call\nx</s>\n<s>tool\ny</s>\n<s>assistant\n"},
    {"monarch", 0, "system\n Be terse. </s>\n<s>user\nHi there</s>\n<s>assistant\n Hello! </s>\n<s>user\nCapital of France?\n</s>\n<s>assistant_tool_call\nx</s>\n<s>tool\ny</s>\n"},
    {"openchat", 1, " Be terse. <|end_of_turn|>GPT4 Correct User: Hi there<|end_of_turn|>GPT4 Correct Assistant:  Hello! <|end_of_turn|>GPT4 Correct User: Capital of France?\n<|end_of_turn|>GPT4 Correct Assistant_tool_call: x<|end_of_turn|>GPT4 Correct Tool: y<|end_of_turn|>GPT4 Correct Assistant:"},
    {"openchat", 0, " Be terse. <|end_of_turn|>GPT4 Correct User: Hi there<|end_of_turn|>GPT4 Correct Assistant:  Hello! <|end_of_turn|>GPT4 Correct User: Capital of France?\n<|end_of_turn|>GPT4 Correct Assistant_tool_call: x<|end_of_turn|>GPT4 Correct Tool: y<|end_of_turn|>"},
    {"orion", 1, "Human:  Be terse. \n\nHi there\n\nAssistant: </s> Hello! </s>Human: Capital of France?\n\n\nAssistant: </s>x</s>y</s>"},
    {"orion", 0, "Human:  Be terse. \n\nHi there\n\nAssistant: </s> Hello! </s>Human: Capital of France?\n\n\nAssistant: </s>x</s>y</s>"},
    {"phi3", 1, "<|system|>\n Be terse. <|end|>\n<|user|>\nHi there<|end|>\n<|assistant|>\n Hello! <|end|>\n<|user|>\nCapital of France?\n<|end|>\n<|assistant_tool_call|>\nx<|end|>\n<|tool|>\ny<|end|>\n<|assistant|>\n"},
    {"phi3", 0, "<|system|>\n Be terse. <|end|>\n<|user|>\nHi there<|end|>\n<|assistant|>\n Hello! <|end|>\n<|user|>\nCapital of France?\n<|end|>\n<|assistant_tool_call|>\nx<|end|>\n<|tool|>\ny<|end|>\n"},
    {"phi4", 1, "<|im_start|>system<|im_sep|> Be terse. <|im_end|><|im_start|>user<|im_sep|>Hi there<|im_end|><|im_start|>assistant<|im_sep|> Hello! <|im_end|><|im_start|>user<|im_sep|>Capital of France?\n<|im_end|><|im_start|>assistant_tool_call<|im_sep|>x<|im_end|><|im_start|>tool<|im_sep|>y<|im_end|><|im_start|>assistant<|im_sep|>"},
    {"phi4", 0, "<|im_start|>system<|im_sep|> Be terse. <|im_end|><|im_start|>user<|im_sep|>Hi there<|im_end|><|im_start|>assistant<|im_sep|> Hello! <|im_end|><|im_start|>user<|im_sep|>Capital of France?\n<|im_end|><|im_start|>assistant_tool_call<|im_sep|>x<|im_end|><|im_start|>tool<|im_sep|>y<|im_end|>"},
    {"rwkv-world", 1, "System: Be terse.\n\nUser: Hi there\n\nAssistant: Hello!\n\nUser: Capital of France?\n\n"},
    {"rwkv-world", 0, "System: Be terse.\n\nUser: Hi there\n\nAssistant: Hello!\n\nUser: Capital of France?\n\n"},
    {"seed_oss", 1, "<seed:bos>system\n Be terse. <seed:eos><seed:bos>user\nHi there<seed:eos><seed:bos>assistant\nHello!<seed:eos><seed:bos>user\nCapital of France?\n<seed:eos><seed:bos>assistant_tool_call\nx<seed:eos><seed:bos>tool\ny<seed:eos><seed:bos>assistant\n"},
    {"seed_oss", 0, "<seed:bos>system\n Be terse. <seed:eos><seed:bos>user\nHi there<seed:eos><seed:bos>assistant\nHello!<seed:eos><seed:bos>user\nCapital of France?\n<seed:eos><seed:bos>assistant_tool_call\nx<seed:eos><seed:bos>tool\ny<seed:eos>"},
    {"smolvlm", 1, "<|im_start|> Be terse. \n\nUser: Hi there<end_of_utterance>\nAssistant:  Hello! <end_of_utterance>\nUser: Capital of France?\n<end_of_utterance>\nAssistant: x<end_of_utterance>\nAssistant: y<end_of_utterance>\nAssistant:"},
    {"smolvlm", 0, "<|im_start|> Be terse. \n\nUser: Hi there<end_of_utterance>\nAssistant:  Hello! <end_of_utterance>\nUser: Capital of France?\n<end_of_utterance>\nAssistant: x<end_of_utterance>\nAssistant: y<end_of_utterance>\n"},
    {"solar-open", 1, "<|begin|>system<|content|> Be terse. <|end|><|begin|>user<|content|>Hi there<|end|><|begin|>assistant<|content|> Hello! <|end|><|begin|>user<|content|>Capital of France?\n<|end|><|begin|>assistant_tool_call<|content|>x<|end|><|begin|>tool<|content|>y<|end|><|begin|>assistant"},
    {"solar-open", 0, "<|begin|>system<|content|> Be terse. <|end|><|begin|>user<|content|>Hi there<|end|><|begin|>assistant<|content|> Hello! <|end|><|begin|>user<|content|>Capital of France?\n<|end|><|begin|>assistant_tool_call<|content|>x<|end|><|begin|>tool<|content|>y<|end|>"},
    {"vicuna", 1, " Be terse. \n\nUSER: Hi there\nASSISTANT:  Hello! </s>\nUSER: Capital of France?\n\nASSISTANT:"},
    {"vicuna", 0, " Be terse. \n\nUSER: Hi there\nASSISTANT:  Hello! </s>\nUSER: Capital of France?\n\n"},
    {"vicuna-orca", 1, "SYSTEM:  Be terse. \nUSER: Hi there\nASSISTANT:  Hello! </s>\nUSER: Capital of France?\n\nASSISTANT:"},
    {"vicuna-orca", 0, "SYSTEM:  Be terse. \nUSER: Hi there\nASSISTANT:  Hello! </s>\nUSER: Capital of France?\n\n"},
    {"zephyr", 1, "<|system|>\n Be terse. <|endoftext|>\n<|user|>\nHi there<|endoftext|>\n<|assistant|>\n Hello! <|endoftext|>\n<|user|>\nCapital of France?\n<|endoftext|>\n<|assistant_tool_call|>\nx<|endoftext|>\n<|tool|>\ny<|endoftext|>\n<|assistant|>\n"},
    {"zephyr", 0, "<|system|>\n Be terse. <|endoftext|>\n<|user|>\nHi there<|endoftext|>\n<|assistant|>\n Hello! <|endoftext|>\n<|user|>\nCapital of France?\n<|endoftext|>\n<|assistant_tool_call|>\nx<|endoftext|>\n<|tool|>\ny<|endoftext|>\n"},
    {"{{ '<|endofuserprompt|>' }}", 1, "<|system|> Be terse. <|endofsystem|><|userprompt|>Hi there<|endofuserprompt|><|response|> Hello! <|endofresponse|><|userprompt|>Capital of France?\n<|endofuserprompt|><|response|>x<|endofresponse|><|response|>y<|endofresponse|><|response|>"},
    {"{{ '<|endofuserprompt|>' }}", 0, "<|system|> Be terse. <|endofsystem|><|userprompt|>Hi there<|endofuserprompt|><|response|> Hello! <|endofresponse|><|userprompt|>Capital of France?\n<|endofuserprompt|><|response|>x<|endofresponse|><|response|>y<|endofresponse|>"},
};

static const struct kvfs_chat_msg CONV[] = {
    {"system", " Be terse. "}, {"user", "Hi there"}, {"assistant", " Hello! "}, {"user", "Capital of France?\n"},
    {"assistant_tool_call", "x"}, {"tool", "y"},
};

int main(void)
{
    char err[256], *out;
    for (size_t i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++) {
        int rc = kvfs_chat_render(CASES[i].tmpl, CONV, 6, CASES[i].add_ass, &out, err, sizeof(err));
        CHECK_EQ(rc, 0);
        if (rc)
            continue;
        if (strcmp(out, CASES[i].want))
            fprintf(stderr, "%s add_ass=%d:\n got  [%s]\n want [%s]\n", CASES[i].tmpl, CASES[i].add_ass, out,
                    CASES[i].want);
        CHECK(!strcmp(out, CASES[i].want));
        free(out);
    }

    /* a chatml template's literal default system message (SmolLM2's form,
     * with a real newline, and Qwen 2.5's, with \n escaped) */
    static const char smol[] = "{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
                               "You are SmolLM<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + "
                               "'\\n' + message['content'] + '<|im_end|>' + '\\n'}}";
    static const char qwen[] = "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
                               "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, it\\'s \"ok\".<|im_end|>\\n' }}";
    const struct kvfs_chat_msg user = {"user", "Hi"};
    CHECK_EQ(kvfs_chat_render(smol, &user, 1, 1, &out, err, sizeof(err)), 0);
    CHECK(!strcmp(out, "<|im_start|>system\nYou are SmolLM<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                       "<|im_start|>assistant\n"));
    free(out);
    CHECK_EQ(kvfs_chat_render(qwen, &user, 1, 0, &out, err, sizeof(err)), 0);
    CHECK(!strcmp(out, "<|im_start|>system\nYou are Qwen, it's \"ok\".<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"));
    free(out);
    CHECK_EQ(kvfs_chat_render(smol, CONV, 2, 0, &out, err, sizeof(err)), 0); /* a system turn of its own */
    CHECK(!strcmp(out, "<|im_start|>system\n Be terse. <|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"));
    free(out);

    /* detection: llama.cpp's order (phi4 is <|im_start|> + <|im_sep|>), refusals */
    const char *name;
    CHECK_EQ(kvfs_chat_detect("{{ '<|im_start|>' }}{{ '<|im_sep|>' }}", &name, err, sizeof(err)), 0);
    CHECK(!strcmp(name, "phi4"));
    CHECK_EQ(kvfs_chat_detect("{{ bos_token }}<start_of_turn>", &name, err, sizeof(err)), 0);
    CHECK(!strcmp(name, "gemma"));
    CHECK_EQ(kvfs_chat_detect("[INST][SYSTEM_PROMPT]", &name, err, sizeof(err)), 0);
    CHECK(!strcmp(name, "mistral-v7"));
    CHECK_EQ(kvfs_chat_detect("{{ messages }}", &name, err, sizeof(err)), -ENOENT);
    CHECK(strstr(err, "not recognised") != NULL);
    CHECK_EQ(kvfs_chat_detect("gigachat", &name, err, sizeof(err)), -ENOTSUP);
    CHECK(strstr(err, "'gigachat'") != NULL);
    out = NULL;
    CHECK_EQ(kvfs_chat_render("", &user, 1, 1, &out, err, sizeof(err)), -ENOENT);
    CHECK(out == NULL);
    CHECK_DONE();
}
