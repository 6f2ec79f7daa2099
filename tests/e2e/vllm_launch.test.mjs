// A vLLM-style launch line in effect on a running server: the positional
// model, several --served-model-name aliases, --chat-template FILE and
// --default-chat-template-kwargs (a request's chat_template_kwargs override it
// key by key). /tokenize of a chat renders it, so its ids are compared with the
// ids of the text the template must produce.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { spawnServer } from './helpers.mjs';

const KV = ['--kv-cache-memory', String(16 << 20)];

// A tiny DeepSeek-V3 (its model_type picks the deepseek_v3 output format), made once for the report's lines.
function tinyDeepSeek(ctx) {
  const dir = join(ctx.modelDir, '..', 'model-deepseek');
  if (!existsSync(join(dir, 'config.json')))
    execFileSync(ctx.sluice, ['make-model', '--arch', 'deepseek_v3', '--layers', '2', '--hidden', '64', '--heads', '4',
      '--vocab', '512', '--intermediate', '128', '--seed', '3', '--out', dir], { stdio: 'ignore' });
  return dir;
}

// The line without `flag` and its values (the words up to the next flag), in either spelling.
function withoutFlag(line, flag) {
  const at = line.findIndex((w) => w === flag || w.startsWith(`${flag}=`));
  if (at < 0) return line;
  let end = at + 1;
  if (line[at] === flag) while (end < line.length && !line[end].startsWith('--')) ++end;
  return [...line.slice(0, at), ...line.slice(end)];
}

// The error lines of one `serve --check-only` of the line (each starts with the flag it refuses).
function refusals(ctx, line) {
  const run = spawnSync(ctx.sluice, ['serve', '--check-only', ...KV, ...line], { encoding: 'utf8', timeout: 60_000 });
  const errors = (run.stdout + run.stderr).split('\n').filter((l) => l.includes('[error]'))
    .map((l) => l.slice(l.indexOf('[error]') + 8));
  assert.equal(run.status === 0, errors.length === 0, run.stdout + run.stderr);
  for (const error of errors) assert.ok(error.length > 40, `no reason given: ${error}`);
  return errors;
}

// As an operator would: start, drop every flag a refusal names, until the line starts. Returns
// what is left and the refused flags.
function dropRefused(ctx, line) {
  const refused = [];
  for (let round = 0; round < 8; ++round) {
    const errors = refusals(ctx, line);
    if (errors.length === 0) return { line, refused };
    for (const error of errors) {
      const flag = error.split(/[ :=]/)[0];
      assert.ok(line.some((w) => w === flag || w.startsWith(`${flag}=`)), `refusal names no flag of the line: ${error}`);
      refused.push(flag);
      line = withoutFlag(line, flag);
    }
  }
  assert.fail('the line never started');
}

// Whether the start-up log shows `flag` in effect with `value` (sluice's own flags log
// "flag --x = v"; a vLLM no-op "vllm flag --x v accepted, no effect: why").
function logged(log, flag, value) {
  return log.includes(`flag ${flag} = ${value}`) ||
    log.includes(`vllm flag ${flag}${value === '' ? '' : ` ${value}`} accepted, no effect: `);
}

// A tiny DeepSeek-V4 shipped as V4 checkpoints are: no chat template (DeepSeek's encoder is Python).
function tinyDeepSeekV4(ctx) {
  const dir = join(ctx.modelDir, '..', 'model-deepseek-v4');
  if (!existsSync(join(dir, 'config.json'))) {
    execFileSync(ctx.sluice, ['make-model', '--arch', 'deepseek_v4', '--layers', '3', '--layer-types', 'chs',
      '--hidden', '32', '--heads', '2', '--head-dim', '16', '--vocab', '300', '--experts', '4', '--seed', '6',
      '--out', dir], { stdio: 'ignore' });
    const config = JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8'));
    delete config.chat_template;
    writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify(config));
  }
  return dir;
}

export const tests = {
  async 'vLLM\'s DeepSeek-V4 line: the encoding without a template, thinking into reasoning_content, streamed too'(ctx) {
    const server = await spawnServer(ctx, [tinyDeepSeekV4(ctx), '--served-model-name', 'v4', '--tokenizer-mode',
      'deepseek_v4', '--tool-call-parser', 'deepseek_v4', '--enable-auto-tool-choice', '--reasoning-parser',
      'deepseek_v4', '--block-size', '32', ...KV, '--threads', '1'], { logLevel: 'info' });
    try {
      assert.ok(server.log().includes("chat template from sluice's DeepSeek-V4 encoding"), server.log());
      const openai = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'none', maxRetries: 0 });
      const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'hi' }];
      const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }];
      // Thinking mode: the prompt opens <think>, so what the model writes (up to 6 tokens, no
      // </think> from this random model in the vocabulary's first 300 ids) is reasoning.
      const thinking = await openai.chat.completions.create({ model: 'v4', messages, tools, max_tokens: 6,
        temperature: 0, ignore_eos: true, chat_template_kwargs: { thinking: true } });
      const said = thinking.choices[0].message;
      assert.ok(said.reasoning_content.length > 0, JSON.stringify(said));
      assert.equal(said.content ?? '', '');
      assert.equal(thinking.usage.completion_tokens_details.reasoning_tokens, thinking.usage.completion_tokens);
      // Chat mode: the same tokens are content.
      const chat = await openai.chat.completions.create({ model: 'v4', messages, max_tokens: 6, temperature: 0,
        ignore_eos: true });
      assert.equal(chat.choices[0].message.reasoning_content, undefined);
      assert.ok(chat.choices[0].message.content.length > 0);
      // Streamed, the reasoning comes back whole.
      const stream = await openai.chat.completions.create({ model: 'v4', messages, tools, max_tokens: 6,
        temperature: 0, ignore_eos: true, chat_template_kwargs: { thinking: true }, stream: true });
      let streamed = '';
      for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.reasoning_content ?? '';
      assert.equal(streamed, said.reasoning_content);
      // OpenAI's reasoning_effort, forwarded by gateways as it is, is never refused.
      const effort = await openai.chat.completions.create({ model: 'v4', messages, max_tokens: 1,
        reasoning_effort: 'minimal', chat_template_kwargs: { thinking: true } });
      assert.equal(effort.choices.length, 1);
      // A message the encoding cannot write is a 400 that says why.
      await assert.rejects(openai.chat.completions.create({ model: 'v4', max_tokens: 1, messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function',
          function: { name: 'f', arguments: '[1, 2]' } }] },
        { role: 'tool', tool_call_id: 'c', content: 'done' }] }),
      (e) => e.status === 400 && /deepseek_v4 chat: tool call arguments must be a JSON object/.test(e.message));
    } finally {
      await server.stop();
    }
  },

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
    const dir = tinyDeepSeek(ctx);
    const names = ['deepseek-v4-flash', 'DeepSeek-V4-Flash-0731', 'DeepSeek-V4-Flash', 'DeepSeek-V4.1-Flash', 'deepseek_v41'];
    let line = [dir, '--served-model-name', ...names, '--trust-remote-code', '--tokenizer-mode', 'deepseek_v41',
      '--enable-expert-parallel', '--tensor-parallel-size', '8', '--gpu-memory-utilization', '0.78', '--max-model-len',
      'auto', '--tool-call-parser', 'deepseek_v41', '--enable-auto-tool-choice', '--reasoning-parser', 'deepseek_v41',
      '--mm-encoder-tp-mode', 'data', '--speculative-config', '{"method":"dspark","num_speculative_tokens":5,' +
      '"draft_sample_method":"probabilistic","rejection_sample_method":"block","enable_adaptive_verification":true}'];
    // Each start lists every refusal of its stage, one line each, starting with the flag and a reason;
    // the operator drops those flags (and their values) and starts again.
    // (--tensor-parallel-size and --enable-expert-parallel are sluice flags, real on --device cpu and sim: 8
    // ranks cannot split this tiny model's 4 heads, refused in the second stage; without them
    // --enable-expert-parallel has no ranks to split the experts over, refused in the third.)
    // (--tool-call-parser and --reasoning-parser deepseek_v41 are read: V4.1's DSML calls and <think>.)
    const rounds = [['--tokenizer-mode', '--mm-encoder-tp-mode', '--speculative-config'],
      ['--tensor-parallel-size', '--gpu-memory-utilization'],
      ['--enable-expert-parallel']];
    for (const expected of rounds) {
      const errors = refusals(ctx, line);
      const named = errors.map((l) => l.split(/[ :=]/)[0]);
      assert.deepEqual([...named].sort(), [...expected].sort(), errors.join('\n'));
      for (const flag of expected) line = withoutFlag(line, flag);
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
  async 'the report\'s first launch line: each refusal names its flag, the rest starts, logs its values and serves'(ctx) {
    // Reply 3 of the user report (the vllm-openai:deepseekv41-flash-0909 line), model path
    // replaced by the tiny DeepSeek-V3; the docker and -e parts dropped.
    const line = [tinyDeepSeek(ctx), '--tokenizer-mode', 'deepseek_v41', '--tensor-parallel-size', '8',
      '--tool-call-parser', 'deepseek_v41', '--enable-auto-tool-choice', '--reasoning-parser', 'deepseek_v41',
      '--mm-encoder-tp-mode', 'data', '--trust-remote-code', '--kv-cache-dtype', 'fp8_ds_mla', '--enable-prefix-caching',
      '--enable-prompt-tokens-details', '--enable-expert-parallel', '--speculative-config',
      '{"method":"dspark","num_speculative_tokens":5,"draft_sample_method":"probabilistic",' +
      '"rejection_sample_method":"block","enable_adaptive_verification":true}',
      '--gpu-memory-utilization', '0.9518', '--max-num-seqs', '32', '--seed=0',
      '--default-chat-template-kwargs', '{"thinking": true, "reasoning_effort": "high"}',
      '--compilation-config', '{"mode":1,"cudagraph_mode":"FULL_DECODE_ONLY"}'];
    const { line: left, refused } = dropRefused(ctx, line);
    // What cannot take effect on --device cpu: DeepSeek-V4.1's tokenizer mode (its parsers are read), the
    // FP8 cache, the dspark drafter, torch.compile's settings, a multimodal encoder, 8 GPUs and their memory.
    assert.deepEqual([...refused].sort(), ['--compilation-config', '--enable-expert-parallel', '--gpu-memory-utilization',
      '--kv-cache-dtype', '--mm-encoder-tp-mode', '--speculative-config', '--tensor-parallel-size',
      '--tokenizer-mode'].sort());
    const server = await spawnServer(ctx, [...left, ...KV, '--threads', '1'], { logLevel: 'info' });
    try {
      const log = server.log();
      for (const [flag, value] of [['--enable-auto-tool-choice', 'true'], ['--trust-remote-code', ''],
        ['--enable-prefix-caching', 'true'], ['--enable-prompt-tokens-details', 'true'], ['--max-num-seqs', '32'],
        ['--seed', '0'], ['--default-chat-template-kwargs', '{"thinking": true, "reasoning_effort": "high"}'],
        ['--tool-call-parser', 'deepseek_v41'], ['--reasoning-parser', 'deepseek_v41']])
        assert.ok(logged(log, flag, value), `${flag} ${value} not logged in effect:\n${log}`);
      const openai = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'none', maxRetries: 0 });
      const model = (await openai.models.list()).data[0].id;
      const chat = (extra) => openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 6, temperature: 1, ...extra });
      const r = await chat({});
      assert.equal(r.choices.length, 1);
      assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');  // --enable-prompt-tokens-details
      // --seed=0: a request without a seed samples as one that sends seed 0.
      assert.equal(r.choices[0].message.content, (await chat({ seed: 0 })).choices[0].message.content);
      // --enable-auto-tool-choice: tools without tool_choice (auto) are served, not refused.
      const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }];
      assert.equal((await chat({ tools })).choices.length, 1);
    } finally {
      await server.stop();
    }
  },
};
