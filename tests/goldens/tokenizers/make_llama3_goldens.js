// Reference ids from Hugging Face's Rust tokenizers (npm package `tokenizers`, installed with
// `npm install --ignore-scripts tokenizers` in a scratch folder; run with NODE_PATH pointing at
// its node_modules):
//   node make_llama3_goldens.js llama3-style.json FIXTURES/tokenizers/goldens > gpt2-llama3-style.jsonl
const {Tokenizer} = require('tokenizers');
const fs = require('fs');
const [tokPath, goldDir] = process.argv.slice(2);
(async () => {
  const tok = Tokenizer.fromFile(tokPath);
  const texts = [];
  for (const f of ['gpt2.jsonl', 'gpt-neox-20b.jsonl'])
    for (const line of fs.readFileSync(`${goldDir}/${f}`, 'utf8').split('\n'))
      if (line.trim()) texts.push(JSON.parse(line).text);
  texts.push('<|begin_of_text|>Hello<|end_of_text|> world', "I'M HERE, it's 12345 apples\r\n\r\n  ok");
  const seen = new Set();
  let i = 0;
  for (const text of texts) {
    if (seen.has(text)) continue;
    seen.add(text);
    const add = i++ % 2 === 0;
    const enc = await tok.encode(text, null, {addSpecialTokens: add});
    process.stdout.write(JSON.stringify({text, ids: Array.from(enc.getIds()), add_special_tokens: add,
      origin: 'HF tokenizers 0.23.2 (npm) on make_llama3_style.py output'}) + '\n');
  }
})();
