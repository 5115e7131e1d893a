// The reference tokenization of a tokenizer.json, for test/gguf-hf/generate.py (never run by the
// tests): Hugging Face's tokenizers.js, installed outside the project, e.g.
//   npm install --no-save --prefix /tmp/hftok @huggingface/tokenizers@0.2.0
//   HF_TOKENIZERS=/tmp/hftok/node_modules/@huggingface/tokenizers/dist/tokenizers.mjs \
//     node test/gguf-hf/reference-tokenize.mjs FOLDER TEXT...
// Prints the ids of each TEXT (without added special tokens) as a JSON array of arrays.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const { Tokenizer } = await import(process.env.HF_TOKENIZERS ?? '@huggingface/tokenizers');
const [folder, ...texts] = process.argv.slice(2);
const json = JSON.parse(readFileSync(join(folder, 'tokenizer.json'), 'utf8'));
const config = JSON.parse(readFileSync(join(folder, 'tokenizer_config.json'), 'utf8'));
const tokenizer = new Tokenizer(json, config);
console.log(JSON.stringify(texts.map((t) => tokenizer.encode(t, { add_special_tokens: false }).ids)));
