// The reference tokenization of a tokenizer.json, for test/tokenize/generate.py (never run by the
// tests): Hugging Face's tokenizers.js, installed outside the project, as
// test/gguf-hf/reference-tokenize.mjs uses it:
//   npm install --no-save --prefix /tmp/hftok @huggingface/tokenizers@0.2.0
//   HF_TOKENIZERS=/tmp/hftok/node_modules/@huggingface/tokenizers/dist/tokenizers.mjs \
//     node test/tokenize/reference-bpe.mjs FOLDER < texts.json
// Reads a JSON array of texts on stdin (any text, newlines and all) and prints the ids of each
// (without added special tokens) as a JSON array of arrays.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const { Tokenizer } = await import(process.env.HF_TOKENIZERS ?? '@huggingface/tokenizers');
const [folder] = process.argv.slice(2);
const json = JSON.parse(readFileSync(join(folder, 'tokenizer.json'), 'utf8'));
const configPath = join(folder, 'tokenizer_config.json');
const config = existsSync(configPath) ? JSON.parse(readFileSync(configPath, 'utf8')) : {};
const tokenizer = new Tokenizer(json, config);
const texts = JSON.parse(readFileSync(0, 'utf8'));
console.log(JSON.stringify(texts.map((t) => tokenizer.encode(t, { add_special_tokens: false }).ids)));
