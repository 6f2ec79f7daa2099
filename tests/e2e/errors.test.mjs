// Every class of bad input: the right status and the OpenAI error envelope,
// decided before any response byte (so no SSE headers on errors).
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { client, raw, assertErrorEnvelope } from './helpers.mjs';

const messages = [{ role: 'user', content: 'hi' }];
const chat = (ctx, extra) => raw(ctx, '/v1/chat/completions',
  { body: JSON.stringify({ model: ctx.model, messages, max_tokens: 4, ...extra }) });

export const tests = {
  async 'unknown model is 404 model_not_found'(ctx) {
    await assert.rejects(client(ctx).chat.completions.create({ model: 'nope', messages }), (e) => {
      assert.ok(e instanceof OpenAI.NotFoundError);
      assert.equal(e.code, 'model_not_found');
      return true;
    });
    assertErrorEnvelope(await chat(ctx, { model: 'nope', stream: true }), 404, 'model_not_found');
  },

  async 'context overflow is 400 context_length_exceeded with both counts'(ctx) {
    const long = 'word '.repeat(5000);
    await assert.rejects(client(ctx).chat.completions.create({ model: ctx.model,
      messages: [{ role: 'user', content: long }], stream: true }), (e) => {
      assert.equal(e.status, 400);
      assert.equal(e.code, 'context_length_exceeded');
      assert.match(e.message, /maximum context length is 4096 tokens/);
      assert.match(e.message, /your request has \d+ input tokens/);
      return true;
    });
    const r = await chat(ctx, { max_tokens: 5000 });
    assertErrorEnvelope(r, 400, 'context_length_exceeded');
    assert.match(r.json.error.message,
      /maximum context length is 4096 tokens\. However, you requested \d+ tokens \(\d+ in the messages, 5000 in the completion\)/);
    assert.equal(r.json.error.param, 'max_tokens');
    assert.equal(r.json.error.n_ctx, 4096);
  },

  async 'missing or wrong API key is 401 on every route but /health'(ctx) {
    await assert.rejects(client(ctx, 'wrong-key').chat.completions.create({ model: ctx.model, messages }),
      (e) => e instanceof OpenAI.AuthenticationError);
    for (const [path, method] of [['/v1/models', 'GET'], ['/metrics', 'GET'], ['/v1/completions', 'POST'],
      ['/tokenize', 'POST'], ['/v1/../v1/models', 'GET'], ['/nothing-here', 'GET']]) {
      const r = await raw(ctx, path, { method, auth: false, body: method === 'POST' ? '{}' : undefined });
      assertErrorEnvelope(r, 401);
      assert.equal(r.json.error.type, 'authentication_error');
    }
    assert.equal((await raw(ctx, '/health', { method: 'GET', auth: false })).status, 200);
    const xkey = await raw(ctx, '/v1/models', { method: 'GET', auth: false, headers: { 'x-api-key': ctx.apiKey } });
    assert.equal(xkey.status, 200);
  },

  async 'malformed JSON, wrong types and bad values are 400'(ctx) {
    const bodies = [
      '{"model": "tiny", "messages": [', 'not json at all', '[]', '"a string"', '',
      JSON.stringify({ model: ctx.model, messages: 'hi' }),
      JSON.stringify({ model: ctx.model, messages, max_tokens: -5 }),
      JSON.stringify({ model: ctx.model, messages, max_tokens: 1e20 }),
      JSON.stringify({ model: ctx.model, messages, temperature: 'hot' }),
      JSON.stringify({ model: ctx.model, messages, n: 10000 }),
      JSON.stringify({ model: ctx.model, messages, top_logprobs: 99, logprobs: true }),
      JSON.stringify({ model: ctx.model, messages, stop: Array.from({ length: 100 }, (_, i) => `s${i}`) }),
      JSON.stringify({ model: 7, messages }),
      '{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "temperature": NaN}',
    ];
    for (const body of bodies) {
      const r = await raw(ctx, '/v1/chat/completions', { body });
      assertErrorEnvelope(r, 400);
    }
    assertErrorEnvelope(await raw(ctx, '/v1/completions', { body: JSON.stringify({ model: ctx.model, prompt: '' }) }), 400);
    assertErrorEnvelope(await raw(ctx, '/v1/completions',
      { body: JSON.stringify({ model: ctx.model, prompt: [999999] }) }), 400);
  },

  async 'invalid UTF-8 is 400'(ctx) {
    const prefix = Buffer.from('{"model":"tiny","messages":[{"role":"user","content":"');
    const body = Buffer.concat([prefix, Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}]}')]);
    const r = await fetch(`${ctx.baseURL}/v1/chat/completions`, { method: 'POST', body,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${ctx.apiKey}` } });
    assert.equal(r.status, 400);
    assert.ok((await r.json()).error);
  },

  async '10 MB body is 413, and node fetch reads the answer'(ctx) {
    // The server reads and drops the rest of the body before it closes: closing
    // on unread data resets the connection, and undici then says only "fetch failed".
    const body = JSON.stringify({ model: ctx.model, messages: [{ role: 'user', content: 'x'.repeat(10 << 20) }] });
    for (const path of ['/v1/chat/completions', '/v1/completions']) {
      const r = await raw(ctx, path, { body });
      assertErrorEnvelope(r, 413, 'request_too_large');
    }
  },

  async '"n": 0 and every out-of-range numeric field is a 400 naming it, streamed or not'(ctx) {
    const cases = [['n', 0], ['n', -1], ['n', 2.5], ['best_of', 0], ['max_tokens', 0],
      ['max_completion_tokens', 0], ['max_tokens', 2 ** 64], ['top_k', -2], ['top_k', 1.5], ['top_p', 0],
      ['min_p', 2], ['temperature', -1], ['top_logprobs', 21], ['presence_penalty', 9],
      ['frequency_penalty', -9], ['repetition_penalty', 0], ['seed', 1.5], ['seed', 2 ** 64]];
    for (const stream of [false, true]) {
      for (const [field, value] of cases) {
        // A deadline: "n": 0 used to hang here with the status line written.
        const r = await fetch(`${ctx.baseURL}/v1/chat/completions`, {
          method: 'POST', signal: AbortSignal.timeout(10_000),
          headers: { 'content-type': 'application/json', authorization: `Bearer ${ctx.apiKey}` },
          body: JSON.stringify({ model: ctx.model, messages, max_tokens: 4, stream, [field]: value }) });
        const text = await r.text();
        assert.equal(r.status, 400, `${field}=${value} stream=${stream}: ${text}`);
        const error = JSON.parse(text).error;
        assert.equal(error.param, field, text);
        assert.match(error.message, new RegExp(field), text);
      }
      const completions = await raw(ctx, '/v1/completions',
        { body: JSON.stringify({ model: ctx.model, prompt: 'hi', max_tokens: 4, stream, n: 0, logprobs: -1 }) });
      assertErrorEnvelope(completions, 400);
    }
    // null is the default: the request runs.
    const ok = await chat(ctx, { n: null, temperature: null, top_p: null, seed: null, max_completion_tokens: null,
      top_k: null, min_p: null, presence_penalty: null, frequency_penalty: null, logprobs: null, top_logprobs: null });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.choices.length, 1);
  },

  async 'request-supplied chat templates are refused by default'(ctx) {
    assertErrorEnvelope(await chat(ctx, { chat_template: '{{ 7 * 7 }}' }), 400);
  },

  async 'wrong method and unknown route'(ctx) {
    assert.equal((await raw(ctx, '/v1/chat/completions', { method: 'GET' })).status, 405);
    assertErrorEnvelope(await raw(ctx, '/v1/unknown', { method: 'GET' }), 404);
  },
};
