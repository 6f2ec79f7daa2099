// Oracle for the tokenizer tests: runs the @lenml/tokenizers (transformers.js)
// implementation on the same files and inputs as the C++ tokenizer.
//
//   node reference_encode.mjs <tokenizer dir> <inputs.json>
//
// <inputs.json> is a JSON array of base64 strings: the raw bytes of each input
// (base64 so that invalid UTF-8 reaches Node exactly as the C++ side sees it;
// Node decodes it with U+FFFD replacement, as any JavaScript caller would).
// Prints one JSON array with, per input:
//   text:          the string the reference tokenized (after UTF-8 decoding)
//   ids:           encode(text, {add_special_tokens: false})
//   ids_special:   encode(text, {add_special_tokens: true})
//   decoded:       decode(ids) without clean_up_tokenization_spaces (null if ids is empty)
//   decoded_skip:  decode(ids_special, {skip_special_tokens: true}), same cleanup setting
import fs from "node:fs";
import { TokenizerLoader } from "@lenml/tokenizers";

const [dir, inputsPath] = process.argv.slice(2);
if (!dir || !inputsPath) {
  console.error("usage: node reference_encode.mjs <tokenizer dir> <inputs.json>");
  process.exit(2);
}
const tokenizerJSON = JSON.parse(fs.readFileSync(`${dir}/tokenizer.json`, "utf8"));
const tokenizerConfig = JSON.parse(fs.readFileSync(`${dir}/tokenizer_config.json`, "utf8"));
const tokenizer = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });

const decodeOrNull = (ids, skip) =>
  ids.length === 0
    ? null
    : tokenizer.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: false });

const inputs = JSON.parse(fs.readFileSync(inputsPath, "utf8"));
const results = inputs.map((b64) => {
  const text = Buffer.from(b64, "base64").toString("utf8");
  const ids = tokenizer.encode(text, { add_special_tokens: false });
  const ids_special = tokenizer.encode(text, { add_special_tokens: true });
  return {
    text,
    ids,
    ids_special,
    decoded: decodeOrNull(ids, false),
    decoded_skip: decodeOrNull(ids_special, true),
  };
});
process.stdout.write(JSON.stringify(results));
