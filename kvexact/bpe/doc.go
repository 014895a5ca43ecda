// Package bpe is an in-process Hugging Face tokenizer for the byte-level
// BPE family (GPT-2 style, Llama 3, Qwen 2/2.5/3): it loads a
// tokenizer.json (plain or gzipped) and turns text into exactly the token
// ids the reference implementation (Rust `tokenizers`) produces, so the
// KV-exact tier can key blocks without an engine round trip.
//
// Supported tokenizer.json features: model BPE (vocab, merges as "a b"
// strings or pairs, ignore_merges); added tokens matched verbatim before
// anything else (special and not, longest first — HF's
// split_special_tokens=false); normalizer null, NFC or a Sequence of them;
// pre_tokenizer ByteLevel (optionally with the GPT-2 regex) or a Sequence
// of Split (Regex or String pattern; behavior Isolated, or Removed
// inverted as GPT-4o's file has) and
// ByteLevel; post_processor ByteLevel, TemplateProcessing or a Sequence of
// them (special tokens added only when asked). Anything else is refused
// at load with an error naming the feature, never approximated:
// SentencePiece/Unigram models (Llama 2, Gemma) are out of scope.
//
// Chat requests are rendered by built-in renderers for the templates whose
// tokenizer_config.json chat_template they recognise (chat.go): ChatML
// (Qwen 2/2.5/3) and Llama 3. A request using tools, multimodal parts,
// chat_template overrides or kwargs gets ErrUnsupportedChat, and the
// caller falls back to the engine's /tokenize.
//
// The pre-tokenizer regexes use lookahead, which RE2 (regexp) lacks, so
// they run on github.com/dlclark/regexp2; NFC is golang.org/x/text.
package bpe
