#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizers/: per model family a small tokenizer.json built and trained with the
`tokenizers` library in that family's real configuration (normalizer, pre-tokenizer and its regex,
post-processor, decoder, model options, added tokens and their flags), plus the ids and decoded strings
the library gives for a corpus of hard texts; and normalizers.json, what Python's unicodedata and str
methods and the library's normalizers give for the same corpus. tests/tokenizer/tokenizer_families_test.cpp
checks gpueval against these files.

Not run in CI: the outputs are committed. Needs the `tokenizers` library (0.20+):
    .venv-gpu/bin/python scripts/make_tokenizer_fixtures.py [--shared ../shared]

Where each configuration comes from (model hubs are not reachable from here): transformers'
convert_slow_tokenizer.py (Qwen2Converter, GemmaConverter, LlamaConverter, GPT2Converter,
TikTokenConverter) and models/{qwen2,gemma,llama,gpt_neox}/tokenization_*.py, and the released
tokenizer.json files quoted in public repositories (docs/models.md lists them per family).
"""

import argparse
import csv
import json
import sys
import unicodedata
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

# Qwen2/2.5/3: one digit per piece.
QWEN_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Llama 3 (and SmolLM3), and OLMo 2's cl100k-derived tokenizer: up to three digits per piece.
CL100K_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Texts where tokenizers differ when they get Unicode wrong.
CORPUS = [
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "caf\u00e9 vs cafe\u0301, na\u00efve vs nai\u0308ve, \u00c5ngstr\u00f6m",
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u116e\u11a8 \ud55c\uad6d\uc5b4",
    "\uff26\uff55\uff4c\uff4c\uff57\uff49\uff44\uff54\uff48 \uff21\uff22\uff23 \uff11\uff12\uff13",
    "\ufb01ne \ufb02ow \ufb00 of\ufb03ce",
    "x\u00b2 + y\u00b3 = z\u2074, H\u2082O, \u00bd \u2160\u2161\u216b \u2460",
    "\u0130stanbul \u0131 I i \u0130I",
    "Stra\u00dfe STRASSE \u00df \u1e9e",
    "\u039f\u0394\u03a5\u03a3\u03a3\u0395\u03a5\u03a3 \u03a3\u03af\u03c3\u03c5\u03c6\u03bf\u03c2 \u03a3\u0391\u03a3. \u0391\u03a3 \u03c3",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 family \U0001f44d\U0001f3fd \U0001f1e9\U0001f1ea \u2764\ufe0f",
    "\u4e2d\u6587\u5b57\u7b26\u548c\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3002",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "1234567890 3.14159 1,000,000 007",
    "multiple   spaces\t\ttabs\n\nnew lines\r\n end  ",
    "\u2126 \u212b \u212a \u01c5 \u01c8 \u0149",
    "don't I'LL we've THEY'RE it's",
    "  leading and trailing  ",
    "\n",
    " ",
    "",
]

# The family's special tokens go into these texts, in place of {0}, {1}, {2}.
SPECIAL_TEMPLATES = [
    "{0}Hello{1}\nworld {2} caf\u00e9",
    "text{0}{1}  {2}end",
]


def training_lines(shared: Path):
    lines = []
    for path in sorted((shared / "data" / "mmlu" / "dev").glob("*.csv"))[:12]:
        with open(path, newline="", encoding="utf-8") as f:
            for row in csv.reader(f):
                lines.append(" ".join(row[:5]))
    return lines + CORPUS * 3


def with_byte_tokens(tok: Tokenizer) -> Tokenizer:
    """SentencePiece-style vocabularies hold <0x00>..<0xFF>, which byte_fallback turns bytes into."""
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    for b in range(256):
        name = f"<0x{b:02X}>"
        if name not in vocab:
            vocab[name] = len(vocab)
    return Tokenizer.from_str(json.dumps(spec))


def byte_level_family(lines, pre_tokenizer, normalizer=None, specials=(), leading_specials=(), post=None,
                      ignore_merges=False, vocab_size=330, extra_added=()):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(leading_specials),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(lines, trainer)
    tok.add_special_tokens(list(specials))
    tok.add_tokens(list(extra_added))
    tok.post_processor = post if post is not None else processors.ByteLevel(trim_offsets=False)
    return tok


def sentencepiece_family(lines, normalizer, pre_tokenizer, decoder, leading_specials, bos, specials, vocab_size=330):
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoder
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(leading_specials), limit_alphabet=90,
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer)
    tok = with_byte_tokens(tok)
    tok.add_special_tokens(list(leading_specials) + list(specials))
    tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])
    return tok


def families(lines):
    metaspace_decoder = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    special = lambda content, **kw: AddedToken(content, special=True, normalized=False, **kw)  # noqa: E731
    return {
        # Qwen2/2.5/3: NFC, the Qwen Split regex, byte-level BPE; <think> is a plain added token in Qwen3.
        "qwen2": byte_level_family(
            lines, pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(QWEN_REGEX), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
            normalizer=normalizers.NFC(),
            specials=[special("<|endoftext|>"), special("<|im_start|>"), special("<|im_end|>")],
            extra_added=[AddedToken("<think>", special=False, normalized=False),
                         AddedToken("</think>", special=False, normalized=False)]),
        # GPT-NeoX / Pythia: NFC, GPT-2's ByteLevel with its own regex; runs of spaces are added tokens
        # matched in the normalized text (normalized=true, special=false).
        "gpt_neox": byte_level_family(
            lines, pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
            normalizer=normalizers.NFC(), leading_specials=[special("<|endoftext|>"), special("<|padding|>")],
            post=processors.ByteLevel(trim_offsets=True),
            extra_added=[AddedToken(" " * n, special=False, normalized=True) for n in (4, 3, 2)]),
        # OLMo 2: the cl100k regex split, then byte-level without a regex.
        "olmo2": byte_level_family(
            lines, pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(CL100K_REGEX), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
            specials=[special("<|endoftext|>"), special("<|fim_prefix|>"), special("<|endofprompt|>"),
                      special("<|pad|>")]),
        # GPT-2: ByteLevel with its regex, <|endoftext|>.
        "gpt2": byte_level_family(
            lines, pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
            specials=[special("<|endoftext|>")], post=processors.ByteLevel(trim_offsets=True)),
        # Llama 3 and SmolLM3: cl100k regex split, ignore_merges, <|begin_of_text|> added by the template.
        "llama3": byte_level_family(
            lines, pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(CL100K_REGEX), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
            leading_specials=[special("<|begin_of_text|>"), special("<|end_of_text|>")],
            specials=[special("<|eot_id|>"), special("<|start_header_id|>"), special("<|end_header_id|>")],
            ignore_merges=True,
            post=processors.Sequence([processors.ByteLevel(trim_offsets=False),
                                      processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                                    special_tokens=[("<|begin_of_text|>", 0)])])),
        # Granite 3: StarCoder's digits-one-by-one then GPT-2's ByteLevel.
        "granite": byte_level_family(
            lines, pre_tokenizers.Sequence([
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)]),
            leading_specials=[special("<|endoftext|>"), special("<fim_prefix>")],
            specials=[special("<|start_of_role|>"), special("<|end_of_role|>"), special("<|tool_call|>")]),
        # Gemma 2/3: every space a word mark, a (no-op after that) Split on " ", byte fallback, <bos> first.
        "gemma": sentencepiece_family(
            lines, normalizers.Replace(" ", "\u2581"), pre_tokenizers.Split(" ", "merged_with_previous"),
            decoders.Sequence(metaspace_decoder),
            leading_specials=[special("<pad>"), special("<eos>"), special("<bos>"), special("<unk>")], bos="<bos>",
            specials=[special("<start_of_turn>"), special("<end_of_turn>")]),
        # Phi-3: Llama-2's legacy SentencePiece layout (a mark prepended, spaces to marks, the first
        # space stripped on decode); its chat markers strip the whitespace after them.
        "phi3": sentencepiece_family(
            lines, normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]), None,
            decoders.Sequence(metaspace_decoder + [decoders.Strip(" ", 1, 0)]),
            leading_specials=[special("<unk>"), special("<s>"), special("</s>")], bos="<s>",
            specials=[special("<|endoftext|>"), special("<|assistant|>", rstrip=True), special("<|end|>", rstrip=True),
                      special("<|user|>", rstrip=True)]),
    }


def expected_cases(tok: Tokenizer, specials):
    texts = list(CORPUS)
    names = (specials * 3)[:3] if specials else ["", "", ""]
    texts += [t.format(*names) for t in SPECIAL_TEMPLATES]
    cases = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        ids_special = tok.encode(text, add_special_tokens=True).ids
        cases.append({"text": text, "ids": ids, "ids_special": ids_special,
                      "decoded": tok.decode(ids_special, skip_special_tokens=False),
                      "decoded_skip": tok.decode(ids_special, skip_special_tokens=True)})
    return cases


def normalizer_cases():
    hf = {"nfc": normalizers.NFC(), "nfd": normalizers.NFD(), "nfkc": normalizers.NFKC(), "nfkd": normalizers.NFKD()}
    cases = []
    for text in CORPUS:
        case = {"text": text}
        for name, normalizer in hf.items():
            case[name] = unicodedata.normalize(name.upper(), text)
            if normalizer.normalize_str(text) != case[name]:
                sys.exit(f"tokenizers' {name} differs from unicodedata on {text!r}")
        case["lowercase"] = normalizers.Lowercase().normalize_str(text)
        case["strip_accents_nfd"] = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents()]).normalize_str(text)
        case["bert"] = normalizers.BertNormalizer().normalize_str(text)
        case["python_lower"] = text.lower()
        case["python_upper"] = text.upper()
        cases.append(case)
    return cases


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parent.parent
    parser.add_argument("--shared", type=Path, default=root.parent / "shared")
    parser.add_argument("--out", type=Path, default=root / "tests" / "fixtures" / "tokenizers")
    args = parser.parse_args()
    lines = training_lines(args.shared)
    args.out.mkdir(parents=True, exist_ok=True)
    for family, tok in families(lines).items():
        folder = args.out / family
        folder.mkdir(exist_ok=True)
        (folder / "tokenizer.json").write_text(tok.to_str(), encoding="utf-8")
        # Reloaded, so the ids are those of the file gpueval reads.
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        specials = [t.content for t in tok.get_added_tokens_decoder().values() if t.special]
        expected = {"family": family, "tokenizers_version": __import__("tokenizers").__version__,
                    "cases": expected_cases(tok, specials[-3:])}
        (folder / "expected.json").write_text(json.dumps(expected, ensure_ascii=False, separators=(",", ":")) + "\n",
                                              encoding="utf-8")
    normalized = {"python": sys.version.split()[0], "unicodedata": unicodedata.unidata_version,
                  "cases": normalizer_cases()}
    (args.out / "normalizers.json").write_text(json.dumps(normalized, ensure_ascii=False, indent=0) + "\n",
                                               encoding="utf-8")


if __name__ == "__main__":
    main()
