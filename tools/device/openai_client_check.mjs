// The official openai npm client against a running sluice server (issue 15's
// end to end on the GPU machine: tools/device/deepseek_serve.sh runs it when
// node and node_modules/openai are there). Random weights: the text is noise,
// so each check asserts the shape the client parses, not the words.
//
//   node tools/device/openai_client_check.mjs PORT MODEL
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { VERSION } from 'openai/version';

const [port, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'none', maxRetries: 0 });
const messages = [{ role: 'user', content: 'Say hello in three languages.' }];

const checks = {
  async models() {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    assert.ok(ids.includes(model), `${model} not in ${ids}`);
    return `${ids.length} model(s)`;
  },
  async chat() {
    const r = await client.chat.completions.create({ model, messages, max_tokens: 16 });
    const c = r.choices[0];
    assert.equal(c.message.role, 'assistant');
    assert.equal(typeof c.message.content, 'string');
    assert.ok(['length', 'stop'].includes(c.finish_reason), c.finish_reason);
    assert.ok(r.usage.completion_tokens > 0 && r.usage.prompt_tokens > 0, JSON.stringify(r.usage));
    return `finish ${c.finish_reason}, usage ${r.usage.prompt_tokens} + ${r.usage.completion_tokens}`;
  },
  async stream() {
    const stream = await client.chat.completions.create({ model, messages, max_tokens: 16, stream: true,
      stream_options: { include_usage: true } });
    let chunks = 0, finish = null, usage = null;
    for await (const chunk of stream) {
      ++chunks;
      if (chunk.choices.length > 0 && chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
      if (chunk.usage) usage = chunk.usage;
    }
    assert.ok(chunks > 1 && finish !== null && usage !== null, `${chunks} chunks, finish ${finish}`);
    return `${chunks} chunks, finish ${finish}, usage ${usage.completion_tokens} tokens`;
  },
  async tools() {
    // tool_choice auto through the checkpoint's deepseek_v3 parser; a call is accepted, not expected.
    const tools = [{ type: 'function', function: { name: 'get_weather', description: 'weather in a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
    const r = await client.chat.completions.create({ model, max_tokens: 32, tools, tool_choice: 'auto',
      messages: [{ role: 'user', content: 'Weather in Paris?' }] });
    const c = r.choices[0];
    assert.ok(c.message.tool_calls === undefined || Array.isArray(c.message.tool_calls));
    return `finish ${c.finish_reason}, tool calls ${c.message.tool_calls?.length ?? 0}`;
  },
  async completions() {
    const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8 });
    assert.equal(typeof r.choices[0].text, 'string');
    return `finish ${r.choices[0].finish_reason}`;
  },
  async badRequest() {
    // A request the server must refuse with a clear 400, which the client raises as BadRequestError.
    await assert.rejects(client.chat.completions.create({ model, messages, max_tokens: -1 }),
      (e) => e instanceof OpenAI.BadRequestError);
    return 'refused with 400';
  },
};

let failed = 0;
for (const [name, check] of Object.entries(checks)) {
  try {
    console.log(`openai ${VERSION} ${name}: ${await check()}`);
  } catch (e) {
    ++failed;
    console.log(`openai ${name}: FAILED ${e.message}`);
  }
}
console.log(`openai client checks: ${failed === 0 ? 'ok' : `${failed} FAILED`}`);
process.exit(failed === 0 ? 0 : 1);
