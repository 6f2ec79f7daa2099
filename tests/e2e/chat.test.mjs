// Chat and completions through the official openai client, checked against an
// independent oracle (`sluice generate`, which runs the CPU backend without the
// engine or the server) and against the wire-format rules gateways rely on.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { assertErrorEnvelope, client, raw, sseData } from './helpers.mjs';

const messages = [{ role: 'user', content: 'Say something.' }];

function assertUsage(usage) {
  assert.ok(usage.prompt_tokens > 0);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  assert.equal(typeof usage.prompt_tokens_details.cached_tokens, 'number');
  assert.ok(usage.prompt_tokens_details.cached_tokens <= usage.prompt_tokens);
  assert.equal(typeof usage.completion_tokens_details.reasoning_tokens, 'number');
}

export const tests = {
  async 'completions greedy text equals sluice generate'(ctx) {
    const ids = [5, 17, 300, 42, 7];
    const out = execFileSync(ctx.sluice, ['generate', '--model', ctx.modelDir, '--prompt-ids', ids.join(','),
      '--max-tokens', '12', '--ignore-eos', '--threads', '1']).toString().trim();
    const expectedIds = out.split(',').map(Number);
    const expectedText = (await raw(ctx, '/detokenize', { body: JSON.stringify({ tokens: expectedIds }) })).json.prompt;
    const r = await client(ctx).completions.create({ model: ctx.model, prompt: ids, max_tokens: 12,
      temperature: 0, ignore_eos: true, skip_special_tokens: false });
    assert.equal(r.object, 'text_completion');
    assert.equal(r.choices[0].text, expectedText);
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.prompt_tokens, ids.length);
    assert.equal(r.usage.completion_tokens, 12);
  },

  async 'chat non-streaming shape'(ctx) {
    const r = await client(ctx).chat.completions.create({ model: ctx.model, messages, max_tokens: 8, temperature: 0 });
    assert.equal(r.object, 'chat.completion');
    assert.ok(Number.isInteger(r.created));
    assert.match(r.id, /^chatcmpl-/);
    assert.equal(r.model, ctx.model);
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(typeof r.choices[0].message.content, 'string');
    assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
    assert.ok(r.usage.completion_tokens <= 8);
    assertUsage(r.usage);
    // The prompt is what the chat template renders, as /tokenize says.
    const tok = await raw(ctx, '/tokenize', { body: JSON.stringify({ messages }) });
    assert.equal(tok.json.count, r.usage.prompt_tokens);
  },

  async 'chat streaming with include_usage matches non-streaming'(ctx) {
    const params = { model: ctx.model, messages, max_tokens: 10, temperature: 0, ignore_eos: true };
    const whole = await client(ctx).chat.completions.create(params);
    const stream = await client(ctx).chat.completions.create({ ...params, stream: true,
      stream_options: { include_usage: true } });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    assert.ok(chunks.length >= 3);
    const { id, created } = chunks[0];
    for (const c of chunks) {
      assert.equal(c.id, id);
      assert.equal(c.created, created);
      assert.ok(Number.isInteger(c.created));
      assert.equal(c.object, 'chat.completion.chunk');
    }
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    const last = chunks.at(-1);
    assert.deepEqual(last.choices, []);
    assertUsage(last.usage);
    assert.equal(last.usage.completion_tokens, 10);
    for (const c of chunks.slice(0, -1)) assert.equal(c.usage, null);
    const text = chunks.flatMap((c) => c.choices).map((c) => c.delta.content ?? '').join('');
    assert.equal(text, whole.choices[0].message.content);
    const finishes = chunks.flatMap((c) => c.choices).filter((c) => c.finish_reason);
    assert.deepEqual(finishes.map((c) => c.finish_reason), ['length']);
  },

  async 'raw SSE framing ends with [DONE] and usage last'(ctx) {
    const r = await raw(ctx, '/v1/chat/completions', { body: JSON.stringify({ model: ctx.model, messages,
      max_tokens: 4, stream: true, stream_options: { include_usage: true } }) });
    assert.equal(r.status, 200);
    assert.match(r.headers.get('content-type'), /text\/event-stream/);
    const events = sseData(r.text);
    assert.equal(events.at(-1), '[DONE]');
    assert.deepEqual(events.at(-2).choices, []);
    assert.ok(events.at(-2).usage.prompt_tokens > 0);
    assert.match(r.text, /"created":\d+,/);
  },

  async 'n=2 gives two indexed choices'(ctx) {
    const r = await client(ctx).chat.completions.create({ model: ctx.model, messages, max_tokens: 6, n: 2,
      temperature: 1, seed: 3 });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
    const stream = await client(ctx).chat.completions.create({ model: ctx.model, messages, max_tokens: 6, n: 2,
      stream: true, stream_options: { include_usage: true } });
    const seen = new Set();
    let usage;
    for await (const c of stream) {
      for (const ch of c.choices) seen.add(ch.index);
      if (c.usage) usage = c.usage;
    }
    assert.deepEqual([...seen].sort(), [0, 1]);
    assert.ok(usage.completion_tokens <= 12);
  },

  async 'seed reproducibility'(ctx) {
    const params = { model: ctx.model, messages, max_tokens: 12, temperature: 1.0, top_p: 0.95, seed: 1234,
      ignore_eos: true };
    const a = await client(ctx).chat.completions.create(params);
    const b = await client(ctx).chat.completions.create(params);
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  },

  async 'stop strings cut the output and never leak'(ctx) {
    const base = { model: ctx.model, messages, max_tokens: 64, temperature: 0, ignore_eos: true };
    const full = (await client(ctx).chat.completions.create(base)).choices[0].message.content;
    const chars = Array.from(full);
    assert.ok(chars.length >= 6, `need some text to cut: ${JSON.stringify(full)}`);
    const stop = chars.slice(3, 5).join('');
    const expected = full.slice(0, full.indexOf(stop));
    const r = await client(ctx).chat.completions.create({ ...base, stop: [stop, '\u0000never'] });
    assert.equal(r.choices[0].message.content, expected);
    assert.equal(r.choices[0].finish_reason, 'stop');
    const stream = await client(ctx).chat.completions.create({ ...base, stop, stream: true });
    let text = '';
    let finish;
    for await (const c of stream) {
      for (const ch of c.choices) {
        text += ch.delta.content ?? '';
        finish = ch.finish_reason ?? finish;
      }
    }
    assert.equal(text, expected);
    assert.equal(finish, 'stop');
  },

  async 'logprobs and top_logprobs'(ctx) {
    const r = await client(ctx).chat.completions.create({ model: ctx.model, messages, max_tokens: 5,
      logprobs: true, top_logprobs: 2, ignore_eos: true });
    const entries = r.choices[0].logprobs.content;
    assert.equal(entries.length, r.usage.completion_tokens);
    for (const e of entries) {
      assert.ok(e.logprob <= 0);
      assert.equal(e.top_logprobs.length, 2);
      assert.ok(Array.isArray(e.bytes));
    }
  },

  async 'logit_bias forbids and forces tokens, and the logprobs follow it'(ctx) {
    const ids = [5, 17, 300, 42, 7];
    const greedy = execFileSync(ctx.sluice, ['generate', '--model', ctx.modelDir, '--prompt-ids', ids.join(','),
      '--max-tokens', '1', '--ignore-eos', '--threads', '1']).toString().trim().split(',').map(Number);
    const text = async (tokens) => (await raw(ctx, '/detokenize', { body: JSON.stringify({ tokens }) })).json.prompt;
    const base = { model: ctx.model, prompt: ids, temperature: 0, ignore_eos: true, skip_special_tokens: false };
    const plain = await client(ctx).completions.create({ ...base, max_tokens: 1 });
    assert.equal(plain.choices[0].text, await text(greedy));
    // -100 on the greedy token: another one comes.
    const banned = await client(ctx).completions.create({ ...base, max_tokens: 1, logit_bias: { [greedy[0]]: -100 } });
    assert.notEqual(banned.choices[0].text, plain.choices[0].text);
    // +100 on one id: greedy takes it at every step, with a logprob near 0.
    const forcedId = greedy[0] === 42 ? 43 : 42;
    const forced = await client(ctx).completions.create({ ...base, max_tokens: 4, logprobs: 1,
      logit_bias: { [forcedId]: 100 } });
    assert.equal(forced.choices[0].text, await text([forcedId, forcedId, forcedId, forcedId]));
    for (const lp of forced.choices[0].logprobs.token_logprobs) assert.ok(lp > -1e-3, `logprob ${lp}`);
    // An id outside the vocabulary, a bias past 100, a key that is no id: a 400 naming the field.
    for (const logit_bias of [{ 99999999: 1 }, { 5: 101 }, { x: 1 }]) {
      const r = await raw(ctx, '/v1/chat/completions',
        { body: JSON.stringify({ model: ctx.model, messages, max_tokens: 2, logit_bias }) });
      assertErrorEnvelope(r, 400);
      assert.equal(r.json.error.param, 'logit_bias', r.text);
    }
  },

  async 'completions streaming and multiple prompts'(ctx) {
    const stream = await client(ctx).completions.create({ model: 'tiny-alias', prompt: 'Once upon', max_tokens: 5,
      stream: true, stream_options: { include_usage: true }, ignore_eos: true });
    let text = '';
    let usage;
    for await (const c of stream) {
      for (const ch of c.choices) text += ch.text;
      if (c.usage) usage = c.usage;
    }
    assert.equal(usage.completion_tokens, 5);
    const whole = await client(ctx).completions.create({ model: 'tiny-alias', prompt: 'Once upon', max_tokens: 5,
      temperature: 0, ignore_eos: true });
    assert.equal(typeof whole.choices[0].text, 'string');
    const multi = await client(ctx).completions.create({ model: ctx.model, prompt: ['a b', 'c d'], max_tokens: 3,
      n: 2 });
    assert.deepEqual(multi.choices.map((c) => c.index), [0, 1, 2, 3]);
    void text;
  },

  async 'models, tokenize round trip'(ctx) {
    const models = await client(ctx).models.list();
    assert.deepEqual(models.data.map((m) => m.id), ['tiny', 'tiny-alias']);
    assert.ok(Number.isInteger(models.data[0].created));
    const tok = await raw(ctx, '/tokenize', { body: JSON.stringify({ prompt: 'hello world', add_special_tokens: false }) });
    assert.equal(tok.status, 200);
    const detok = await raw(ctx, '/detokenize', { body: JSON.stringify({ tokens: tok.json.tokens }) });
    assert.equal(detok.json.prompt, 'hello world');
  },
};
