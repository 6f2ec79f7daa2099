// A vLLM-style launch line in effect on a running server: the positional
// model, several --served-model-name aliases, --chat-template FILE and
// --default-chat-template-kwargs (a request's chat_template_kwargs override it
// key by key). /tokenize of a chat renders it, so its ids are compared with the
// ids of the text the template must produce.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnServer } from './helpers.mjs';

export const tests = {
  async 'vllm launch line: positional model, aliases, chat template file and default kwargs'(ctx) {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-vllm-launch-'));
    const template = join(dir, 'template.jinja');
    writeFileSync(template, '{{ greeting }}|{% for m in messages %}{{ m.content }}{% endfor %}|{{ mood }}');
    const server = await spawnServer(ctx, [ctx.modelDir, '--served-model-name', 'first', 'second',
      '--chat-template', template, '--default-chat-template-kwargs', '{"greeting": "hello", "mood": "calm"}',
      '--trust-remote-code', '--disable-log-requests', '--kv-cache-memory', String(16 << 20), '--threads', '1']);
    try {
      const models = await fetch(`${server.baseURL}/v1/models`).then((r) => r.json());
      assert.deepEqual(models.data.map((m) => m.id), ['first', 'second']);
      const post = (body) => fetch(`${server.baseURL}/tokenize`, { method: 'POST', body: JSON.stringify(body) })
        .then(async (r) => { assert.equal(r.status, 200, await r.clone().text()); return r.json(); });
      const ids = async (text) => (await post({ prompt: text, add_special_tokens: false })).tokens;
      const chat = async (extra) => (await post({ messages: [{ role: 'user', content: 'abc' }],
        add_special_tokens: false, ...extra })).tokens;
      assert.deepEqual(await chat({}), await ids('hello|abc|calm'));
      assert.deepEqual(await chat({ chat_template_kwargs: { greeting: 'bye' } }), await ids('bye|abc|calm'));
      // Each alias is accepted in a request.
      for (const model of ['first', 'second']) {
        const r = await fetch(`${server.baseURL}/v1/chat/completions`, { method: 'POST',
          body: JSON.stringify({ model, messages: [{ role: 'user', content: 'x' }], max_tokens: 1 }) });
        assert.equal(r.status, 200, await r.text());
      }
    } finally {
      await server.stop();
    }
  },
};
