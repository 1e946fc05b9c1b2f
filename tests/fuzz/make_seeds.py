#!/usr/bin/env python3
"""Writes the small hand-made seeds of tests/fuzz/seeds/<target>/ (committed; run again after a
format change). scripts/fuzz.sh adds the real files of models/, tasks/, configs/ and ../shared to
these when it assembles a target's corpus. Standard library only."""
import json, os, struct, zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, metadata=None):
    header, blob = {}, b""
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * (-(8 + len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def cbor(v):
    def head(major, n):
        if n < 24: return bytes([major << 5 | n])
        for code, fmt in ((24, ">B"), (25, ">H"), (26, ">I"), (27, ">Q")):
            if n < 1 << (8 * struct.calcsize(fmt)): return bytes([major << 5 | code]) + struct.pack(fmt, n)
    if v is True: return b"\xf5"
    if v is False: return b"\xf4"
    if v is None: return b"\xf6"
    if isinstance(v, int): return head(0, v) if v >= 0 else head(1, -1 - v)
    if isinstance(v, float): return b"\xfb" + struct.pack(">d", v)
    if isinstance(v, str): b = v.encode(); return head(3, len(b)) + b
    if isinstance(v, list): return head(4, len(v)) + b"".join(cbor(x) for x in v)
    if isinstance(v, dict): return head(5, len(v)) + b"".join(cbor(k) + cbor(x) for k, x in v.items())
    raise TypeError(v)


def frame(ftype, payload):
    body = cbor(payload)
    crc = zlib.crc32(bytes([ftype]) + body) & 0xFFFFFFFF
    return b"GEV1" + struct.pack("<I", len(body)) + bytes([ftype]) + struct.pack("<I", crc) + body


f32 = lambda *xs: struct.pack("<%df" % len(xs), *xs)
put("safetensors", "two_tensors.safetensors",
    safetensors([("a", "F32", [2, 2], f32(1, 2, 3, 4)), ("b", "I64", [1], struct.pack("<q", 7))], {"format": "pt"}))
put("safetensors", "bf16_scalar.safetensors",
    safetensors([("s", "BF16", [], b"\x80\x3f"), ("e", "U8", [0], b""), ("f", "F16", [3], b"\x00<" * 3)]))
put("checkpoint_index", "index.json", json.dumps({"metadata": {"total_size": 72}, "weight_map": {
    "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
    "model.norm.weight": "model-00001-of-00002.safetensors",
    "lm_head.weight": "model-00002-of-00002.safetensors"}}))

cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=32, hidden_size=8, intermediate_size=16,
           num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
           rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=1, eos_token_id=[2, 3],
           rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 32}, torch_dtype="bfloat16")
put("model_config", "llama3.json", json.dumps(cfg))

# llama2.c version 0: 7 int32 header, then the weights as float32 (dim 8, hidden 16, 1 layer, 2 heads, vocab 8, seq 4).
dim, hidden, layers, heads, kv, vocab, seq = 8, 16, 1, 2, 2, 8, 4
n = vocab * dim + layers * (dim + 4 * dim * dim + dim + 3 * dim * hidden) + dim + seq * (dim // heads)
put("llama2c_checkpoint", "v0_shared.bin", struct.pack("<7i", dim, hidden, layers, heads, kv, vocab, seq) + f32(*([0.01] * n)))
tok = struct.pack("<i", 4)
for i, piece in enumerate([b"<unk>", b"<s>", b"</s>", b"a", b"b", b"\xe2\x96\x81a", b"ab", b"<0x41>"]):
    tok += struct.pack("<fi", -float(i), len(piece)) + piece
put("llama2c_tokenizer", "tok8.bin", tok)

vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "a": 3, "b": 4, "ab": 5, "Ġ": 6, "Ġa": 7}
bpe = {"version": "1.0", "added_tokens": [{"id": 0, "content": "<unk>", "special": True, "single_word": False,
                                           "lstrip": False, "rstrip": False, "normalized": False}],
       "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                              "use_regex": True},
       "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                                  {"Sequence": {"id": "A", "type_id": 0}}],
                          "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
       "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
       "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                 "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                 "merges": ["a b", "Ġ a"]}}
put("tokenizer_json", "bytelevel_bpe.json", json.dumps(bpe) + "\n#text\nab a ba")

put("run_config", "nightly.yaml", """model: [ckpt/step-1000, ckpt/step-2000]
tasks: [demo_choice, tasks/mmlu/mmlu.yaml]
output: out/night
batch_size: auto
batch_tokens: 0
gpus: "0-3"
dtype: bfloat16
seed: 1234
limit: 100
num_fewshot: 5
add_bos: auto
prefix_reuse: true
data:
  mmlu: /data/mmlu
fail_on_regression: 2.5
heartbeat_timeout_s: 30
max_attempts: 3
""")
put("task_yaml", "choice.yaml", """task: fuzz_choice
dataset_path: docs.jsonl
output_type: multiple_choice
doc_to_text: "Question: {{question.strip()}}\\nAnswer:"
doc_to_choice: "{{choices}}"
doc_to_target: "{{label}}"
num_fewshot: 1
fewshot_path: docs.jsonl
fewshot_config:
  sampler: first_n
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
""")
put("task_yaml", "generate.yaml", """task: fuzz_generate
dataset_path: docs.jsonl
output_type: generate_until
doc_to_text: "{{question}}"
doc_to_target: "{{text}}"
generation_kwargs:
  until: ["\\n", "Question:"]
  do_sample: false
filter_list:
  - name: strict
    filter:
      - function: regex
        regex_pattern: "(\\\\w+)"
      - function: take_first
metric_list:
  - metric: exact_match
    ignore_case: true
""")
put("jsonl", "docs.jsonl", '{"question": "1+1?", "choices": ["1", "2"], "label": 1}\n'
                           '{"question": "\\u00e9t\\u00e9?", "choices": ["a", "b", "c"], "label": 2}\n')
put("csv", "mmlu.csv", 'What is 2+2?,3,4,5,6,B\n"A ""quoted"" one, with a comma",x,y,z,w,A\r\n')
put("hellaswag", "two.txt", "Cooking: He cracks an egg\n2\n into the pan.\n away.\n on the floor.\n quickly.\n"
                            "Sports: She runs\n0\n fast.\n slow.\n up.\n down.\n")
for i, t in enumerate(["{{question}}", "{{choices[label]}}", "Q: {{ question | trim }}\nA:",
                       "{{ 'yes' if t else 'no' }} {{ d.k[1] + n }}", "{{question.split(' ')[0] ~ '!'}}",
                       "{% for c in choices %}{{ loop.index }}. {{ c }}\n{% endfor %}",
                       "{{ choices | join(', ') }} {{ x * 2 }} {{ (n // 2) % 3 }}",
                       "{% if is_fewshot is defined %}{{code}}\n[DONE]{% elif t %}x{% else %}{{question}}{% endif %}",
                       "{{ n ** 2 }} {{ +x }} {{ choices[-1:] }} {{ question[::-1] }}{% raw %}{{ y }}{% endraw %}",
                       "{{ d.k.index(2) }} {{ d.nope if d.nope is defined else question.title() }} {{ [n, x] }}",
                       "a {{- question -}} b {#- note -#} {{ choices | first | upper }}"]):
    put("template", "t%d.txt" % i, t)

for i, t in enumerate(["{% for m in messages %}<|{{ m.role }}|>\n{{ m.content | trim }}\n{% endfor %}"
                       "{% if add_generation_prompt %}<|assistant|>\n{% endif %}",
                       "{%- set ns = namespace(n=0) -%}{%- for m in messages[::-1] if m.role != 'system' -%}"
                       "{%- set ns.n = ns.n + 1 -%}{{ loop.index0 }}:{{ m['content'][:5] ~ '|' }}{%- endfor -%}{{ ns.n }}",
                       "{% macro f(x, y=2) %}{{ x|tojson(indent=y) }}{% endmacro %}{{ f(tools) }}{{ f(messages[-1], 0) }}",
                       "{{ raise_exception('Roles must alternate') if messages|length > 2 }}"
                       "{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(', ') }}",
                       "{% raw %}{{ x }}{% endraw %}  {%- if x is not defined -%} {{ bos_token ~ (1, 'a') }} {%+ endif %}\n"
                       "#context\n{\"bos_token\": \"<s>\", \"messages\": []}"]):
    put("chat_template", "c%d.jinja" % i, t)

item = {"request_index": 0, "part": 0, "parts": 1, "logprob": -1.5, "is_greedy": True, "num_tokens": 2, "text": ""}
work = {"id": 3, "padded_tokens": 8, "items": [{"request_index": 0, "part": 0, "parts": 1, "type": "loglikelihood",
                                                 "tokens": [1, 5, 7, 9], "first_target": 2, "family": 0}],
        "prefix": [1, 5], "prefix_id": 0}
stream = (frame(1, {"model": "m", "load_seconds": 0.5}) + frame(4, {}) +
          frame(3, {"batch_id": 3, "items": [item], "stats": {"tokens_computed": 4, "prefix_tokens": 0, "oom_splits": 0}}) +
          frame(5, {"message": "boom", "batch_id": 3}))
put("wire", "worker_stream.bin", b"\x07" + stream)
put("wire", "scheduler_stream.bin", b"\x00" + frame(2, {"batch": work}) + frame(6, {}) + frame(8, {"nccl_id": "ab"}))
