// A vLLM-style launch line in effect on a running server: the positional
// model, several --served-model-name aliases, --chat-template FILE and
// --default-chat-template-kwargs (a request's chat_template_kwargs override it
// key by key). /tokenize of a chat renders it, so its ids are compared with the
// ids of the text the template must produce.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
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

  async '--seed is the seed of requests that send none'(ctx) {
    const server = await spawnServer(ctx, [ctx.modelDir, '--served-model-name', 'seeded', '--seed', '7',
      '--kv-cache-memory', String(16 << 20), '--threads', '1']);
    try {
      const complete = async (extra) => {
        const r = await fetch(`${server.baseURL}/v1/completions`, { method: 'POST', body: JSON.stringify({
          model: 'seeded', prompt: 'Once upon', max_tokens: 12, temperature: 1, ignore_eos: true, ...extra }) });
        assert.equal(r.status, 200);
        return (await r.json()).choices[0].text;
      };
      // The oracle: a request that sends seed 7 itself; another seed gives other text.
      const unseeded = await complete({});
      assert.equal(await complete({}), unseeded);
      assert.equal(await complete({ seed: 7 }), unseeded);
      assert.notEqual(await complete({ seed: 8 }), unseeded);
    } finally {
      await server.stop();
    }
  },

  async '--generation-config DIR sets request defaults; --no-enable-prompt-tokens-details drops the details'(ctx) {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-generation-config-'));
    writeFileSync(join(dir, 'generation_config.json'), JSON.stringify({ temperature: 0, max_new_tokens: 3 }));
    const server = await spawnServer(ctx, [ctx.modelDir, '--served-model-name', 'configured', '--generation-config',
      dir, '--no-enable-prompt-tokens-details', '--kv-cache-memory', String(16 << 20), '--threads', '1']);
    try {
      const complete = async (extra) => {
        const r = await fetch(`${server.baseURL}/v1/completions`, { method: 'POST', body: JSON.stringify({
          model: 'configured', prompt: 'Once upon', ignore_eos: true, ...extra }) });
        const body = await r.json();
        assert.equal(r.status, 200, JSON.stringify(body));
        return body;
      };
      // max_new_tokens 3 caps a request without max_tokens; an explicit one wins.
      const capped = await complete({});
      assert.equal(capped.usage.completion_tokens, 3);
      assert.equal((await complete({ max_tokens: 5 })).usage.completion_tokens, 5);
      // temperature 0 by default: the same text as an explicitly greedy request, with any seed.
      assert.equal((await complete({ seed: 1 })).choices[0].text, (await complete({ temperature: 0, seed: 2 })).choices[0].text);
      assert.equal(capped.usage.prompt_tokens_details, undefined);
    } finally {
      await server.stop();
    }
    // The shared server keeps the details (sluice's default).
    const r = await fetch(`${ctx.baseURL}/v1/completions`, { method: 'POST',
      headers: { authorization: `Bearer ${ctx.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: ctx.model, prompt: 'Once upon', max_tokens: 1 }) });
    assert.equal(typeof (await r.json()).usage.prompt_tokens_details.cached_tokens, 'number');
  },

  async 'the report\'s second launch line: each refusal names its flag, the rest serves'(ctx) {
    // The user report's `docker run -itd` line (shared/context), model path replaced by a tiny
    // DeepSeek-V3 (its model_type picks the deepseek_v3 format, so --enable-auto-tool-choice holds)
    // and --port 8992 left to the test's free port.
    const dir = join(ctx.modelDir, '..', 'model-deepseek');
    execFileSync(ctx.sluice, ['make-model', '--arch', 'deepseek_v3', '--layers', '2', '--hidden', '64', '--heads', '4',
      '--vocab', '512', '--intermediate', '128', '--seed', '3', '--out', dir], { stdio: 'ignore' });
    const names = ['deepseek-v4-flash', 'DeepSeek-V4-Flash-0731', 'DeepSeek-V4-Flash', 'DeepSeek-V4.1-Flash', 'deepseek_v41'];
    let line = [dir, '--served-model-name', ...names, '--trust-remote-code', '--tokenizer-mode', 'deepseek_v41',
      '--enable-expert-parallel', '--tensor-parallel-size', '8', '--gpu-memory-utilization', '0.78', '--max-model-len',
      'auto', '--tool-call-parser', 'deepseek_v41', '--enable-auto-tool-choice', '--reasoning-parser', 'deepseek_v41',
      '--mm-encoder-tp-mode', 'data', '--speculative-config', '{"method":"dspark","num_speculative_tokens":5,' +
      '"draft_sample_method":"probabilistic","rejection_sample_method":"block","enable_adaptive_verification":true}'];
    // Each start lists every refusal of its stage, one line each, starting with the flag and a reason;
    // the operator drops those flags (and their values) and starts again.
    // (--tensor-parallel-size and --enable-expert-parallel are sluice flags, real on --device sim: refused for
    // --device cpu in the second stage.)
    const rounds = [['--tokenizer-mode', '--mm-encoder-tp-mode', '--speculative-config'],
      ['--tensor-parallel-size', '--enable-expert-parallel', '--gpu-memory-utilization', '--reasoning-parser',
        '--tool-call-parser']];
    for (const expected of rounds) {
      const run = spawnSync(ctx.sluice, ['serve', '--check-only', '--kv-cache-memory', String(16 << 20), ...line],
        { encoding: 'utf8', timeout: 60_000 });
      assert.equal(run.status, 1, run.stdout + run.stderr);
      const errors = (run.stdout + run.stderr).split('\n').filter((l) => l.includes('[error]'))
        .map((l) => l.slice(l.indexOf('[error]') + 8));
      const named = errors.map((l) => l.split(/[ :=]/)[0]);
      assert.deepEqual([...named].sort(), [...expected].sort(), errors.join('\n'));
      for (const error of errors) assert.ok(error.length > 40, `no reason given: ${error}`);
      for (const flag of expected) {
        const at = line.indexOf(flag);
        let end = at + 1;
        while (end < line.length && !line[end].startsWith('--')) ++end;
        line = [...line.slice(0, at), ...line.slice(end)];
      }
    }
    const server = await spawnServer(ctx, [...line, '--kv-cache-memory', String(16 << 20), '--threads', '1']);
    try {
      const models = await fetch(`${server.baseURL}/v1/models`).then((r) => r.json());
      assert.deepEqual(models.data.map((m) => m.id), names);
      const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }];
      for (const model of [names[0], names[4]]) {
        // tool_choice auto (implied by tools): in effect through --enable-auto-tool-choice.
        const r = await fetch(`${server.baseURL}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({
          model, messages: [{ role: 'user', content: 'hi' }], tools, max_tokens: 2 }) });
        assert.equal(r.status, 200, await r.text());
      }
    } finally {
      await server.stop();
    }
  },
};
