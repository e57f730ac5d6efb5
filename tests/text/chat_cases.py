"""chat_cases.py - chat templates and conversations for the chat conformance check
(issue 4, acceptance check 3): every built-in template name m40 implements, and a Jinja
source per family that llama.cpp's detection maps to it."""

NAMES = [
    "chatml", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "mistral-v1",
    "mistral-v3", "mistral-v3-tekken", "mistral-v7", "mistral-v7-tekken", "llama3", "gemma",
    "phi3", "zephyr",
]

JINJA = {
    "chatml (SmolLM2)":
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
        "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|im_start|>assistant\n' }}{% endif %}",
    "chatml (Qwen2.5)":
        "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == 'system' %}"
        "{{- messages[0]['content'] }}{%- else %}{{- 'You are Qwen, created by Alibaba Cloud. "
        "You are a helpful assistant.' }}{%- endif %}{{- '<|im_end|>\\n' }}{%- else %}"
        "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + "
        "messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou "
        "are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
        "{%- endif %}{%- endif %}{%- for message in messages %}{%- if (message.role == 'user') or "
        "(message.role == 'system' and not loop.first) or (message.role == 'assistant') %}"
        "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
        "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}"
        "{{- '<|im_start|>assistant\\n' }}{%- endif %}",
    "llama2 (Llama-2-chat)":
        "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
        "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = "
        "messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
        "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + "
        "system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = "
        "message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' "
        "+ content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + "
        "content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
    "llama2 (Mistral-7B-Instruct-v0.1)":
        "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
        "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
        "{{ message['content'] + eos_token}}{% endif %}{% endfor %}",
    "llama2-sys (<<SYS>>)":
        "{% for message in messages %}{% if message['role'] == 'system' %}{{ '<<SYS>>\\n' + "
        "message['content'] + '\\n<</SYS>>\\n\\n' }}{% elif message['role'] == 'user' %}"
        "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% endif %}{% endfor %}",
    "mistral-v1 (official v1)":
        "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}"
        "{%- endif %}{{- bos_token }}{%- for message in loop_messages %}{%- if message['role'] == "
        "'user' %}{%- if loop.first and system_message is defined %}{{- ' [INST] ' + system_message "
        "+ '\\n\\n' + message['content'] + ' [/INST]' }}{%- else %}{{- ' [INST] ' + "
        "message['content'] + ' [/INST]' }}{%- endif %}{%- endif %}{%- endfor %}",
    "mistral-v3 (tools)":
        "{%- for message in loop_messages %}{%- if message['role'] == 'user' %}{%- if tools is not "
        "none %}{{- '[AVAILABLE_TOOLS] [' }}{%- endif %}{{- '[INST] ' + message['content'] + "
        "'[/INST]' }}{%- endif %}{%- endfor %}",
    "mistral-v3-tekken":
        "{%- for message in loop_messages %}{%- if message['role'] == 'user' %}{%- if tools %}"
        "{{- \"[AVAILABLE_TOOLS][\" }}{%- endif %}{{- \"[INST]\" + message['content'] + "
        "\"[/INST]\" }}{%- endif %}{%- endfor %}",
    "mistral-v7":
        "{{- bos_token }}{%- if system_message is defined %}{{- '[SYSTEM_PROMPT]' + system_message "
        "+ '[/SYSTEM_PROMPT]' }}{%- endif %}{%- for message in loop_messages %}{%- if "
        "message['role'] == 'user' %}{{- '[INST]' + message['content'] + '[/INST]' }}{%- endif %}"
        "{%- endfor %}",
    "llama3 (Llama-3-Instruct)":
        "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
        "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
        "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
        "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
    "gemma (gemma-2-it)":
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role "
        "not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == "
        "'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
        "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + "
        "'<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}"
        "{{'<start_of_turn>model\n'}}{% endif %}",
    "phi3 (Phi-3-mini)":
        "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + "
        "message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + "
        "message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}"
        "{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}",
    "zephyr":
        "{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\n' + "
        "message['content'] + '<|endoftext|>\n' }}{% else %}{{ '<|' + message['role'] + '|>\n' + "
        "message['content'] + '<|endoftext|>\n' }}{% endif %}{% endfor %}",
}

# The default system message m40 takes from a template (chat_detect.h): written, as the
# model's Jinja writes it, when a conversation does not open with a system message. For
# these templates the formatted text is also compared with the Jinja rendering itself.
DEFAULT_SYSTEM = {
    "chatml (SmolLM2)": "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
    "chatml (Qwen2.5)": "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
}

CONVERSATIONS = [
    [("system", "You are a helpful assistant."), ("user", "Hello! How are you?"),
     ("assistant", "I'm fine, thanks. How can I help?"), ("user", "Tell me a story.")],
    [("user", "What is 2+2?"), ("assistant", "4"), ("user", "And 3+3?"),
     ("assistant", "6."), ("user", "Thanks!")],
    [("system", "  Be brief.\n"), ("user", "\t Hi there \n"), ("assistant", "  Hello!  "),
     ("user", "Ünïcödé 😀 and <|im_end|> inside\n\n")],
    [("user", "Just one message.")],
    [("system", "sys one"), ("system", "sys two"), ("user", "u"), ("assistant", "a")],
]


def templates():
    """[(label, template string)]: the names, then the Jinja sources."""
    return [(n, n) for n in NAMES] + list(JINJA.items())
