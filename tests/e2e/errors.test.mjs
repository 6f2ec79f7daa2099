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

  async '10 MB body is 413'(ctx) {
    const body = JSON.stringify({ model: ctx.model, messages: [{ role: 'user', content: 'x'.repeat(10 << 20) }] });
    let status;
    try {
      status = (await raw(ctx, '/v1/chat/completions', { body })).status;
    } catch (e) {
      // The server may close before reading the whole body; then the client sees a reset.
      status = `connection error: ${e.cause?.code ?? e}`;
    }
    assert.ok(status === 413 || /ECONNRESET|EPIPE|UND_ERR_SOCKET/.test(String(status)), String(status));
  },

  async 'request-supplied chat templates are refused by default'(ctx) {
    assertErrorEnvelope(await chat(ctx, { chat_template: '{{ 7 * 7 }}' }), 400);
  },

  async 'wrong method and unknown route'(ctx) {
    assert.equal((await raw(ctx, '/v1/chat/completions', { method: 'GET' })).status, 405);
    assertErrorEnvelope(await raw(ctx, '/v1/unknown', { method: 'GET' }), 404);
  },
};
