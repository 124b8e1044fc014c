#!/usr/bin/env python3
"""A tiny Qwen2 GGUF with random weights and Qwen's real tokenizer (issue 38).

For scripts/local-model-fit.py when no small trained model with a
tool-calling template is at hand: the window-fit measurement needs the real
tokenizer and chat template, not a trained model. The answers it gives are
noise. Needs `gguf` and `numpy` (PyPI).

  scripts/random-qwen2-gguf.py VOCAB.gguf TEMPLATE.jinja OUT.gguf

VOCAB.gguf: llama.cpp's models/ggml-vocab-qwen2.gguf (shipped in the
llama-cpp-python sdist's vendor/llama.cpp); TEMPLATE.jinja: its
models/templates/Qwen-Qwen2.5-7B-Instruct.jinja (Hermes-style
<tool_call> tools, as Qwen2.5's small instruct models use).
"""
import sys, numpy as np
from gguf import GGUFReader, GGUFWriter, GGUFValueType
vocab, template, out = sys.argv[1:4]
r = GGUFReader(vocab)
f = r.fields
tokens = f['tokenizer.ggml.tokens'].contents()
types = f['tokenizer.ggml.token_type'].contents()
merges = f['tokenizer.ggml.merges'].contents()
n_vocab = len(tokens)
E, H, FF, L = 64, 4, 128, 2
w = GGUFWriter(out, 'qwen2')
w.add_name('random-qwen2-tiny (Qwen2 tokenizer, random weights)')
w.add_context_length(32768); w.add_embedding_length(E); w.add_block_count(L)
w.add_feed_forward_length(FF); w.add_head_count(H); w.add_head_count_kv(H)
w.add_rope_freq_base(1000000.0); w.add_layer_norm_rms_eps(1e-6)
w.add_tokenizer_model('gpt2'); w.add_tokenizer_pre('qwen2')
w.add_token_list(tokens); w.add_token_types(types); w.add_token_merges(merges)
w.add_eos_token_id(151645)  # <|im_end|>, as Qwen2.5-Instruct's generation_config
w.add_pad_token_id(151643); w.add_bos_token_id(151643); w.add_add_bos_token(False)
w.add_chat_template(open(template).read())
rng = np.random.default_rng(38)
def t(name, *shape): w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))
t('token_embd.weight', n_vocab, E)
w.add_tensor('output_norm.weight', np.ones(E, np.float32))
for i in range(L):
    p = f'blk.{i}.'
    w.add_tensor(p + 'attn_norm.weight', np.ones(E, np.float32))
    w.add_tensor(p + 'ffn_norm.weight', np.ones(E, np.float32))
    for n in ('attn_q', 'attn_k', 'attn_v'):
        t(p + n + '.weight', E, E); w.add_tensor(p + n + '.bias', np.zeros(E, np.float32))
    t(p + 'attn_output.weight', E, E)
    t(p + 'ffn_gate.weight', FF, E); t(p + 'ffn_up.weight', FF, E); t(p + 'ffn_down.weight', E, FF)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
print(out, n_vocab)
