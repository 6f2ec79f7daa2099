// `sluice serve --device sim`: the model directory's tokenizer and template,
// steps simulated by the cost model. Tokens stay inside the tokenizer's
// ordinary vocabulary (they detokenize to text, never to EOS unless asked), and
// flags that have no effect with the chosen device are refused at start.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import OpenAI from 'openai';
import { assertJsonPrefixes, spawnServer } from './helpers.mjs';

export const tests = {
  async 'sim device streams text tokens and never stops early'(ctx) {
    const server = await spawnServer(ctx, ['--model', ctx.modelDir, '--served-model-name', 'sim', '--device', 'sim',
      '--sim-speed', '0', '--kv-cache-memory', String(64 << 20)]);
    try {
      const openai = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'none', maxRetries: 0 });
      const r = await openai.completions.create({ model: 'sim', prompt: 'hello', max_tokens: 64 });
      assert.equal(r.usage.completion_tokens, 64);
      assert.equal(r.choices[0].finish_reason, 'length');
      assert.ok(!r.choices[0].text.includes('\uFFFD'), 'a token decoded to a replacement character');
      // The same text, token by token, through /detokenize of /tokenize's ids would differ
      // only if ids fell outside the tokenizer; /tokenize round trip checks that.
      const t = await fetch(`${server.baseURL}/tokenize`, { method: 'POST', body: JSON.stringify({
        prompt: r.choices[0].text, add_special_tokens: false }) }).then((x) => x.json());
      const d = await fetch(`${server.baseURL}/detokenize`, { method: 'POST', body: JSON.stringify({
        tokens: t.tokens }) }).then((x) => x.json());
      assert.equal(d.prompt, r.choices[0].text);
      const metrics = await fetch(`${server.baseURL}/metrics`).then((x) => x.text());
      assert.match(metrics, /sluice:prefill_chunk_tokens_count\{model_name="sim"\} [1-9]/);
      // JSON mode on the sim: its tokens follow the engine's mask (a token outside
      // it would fail the request), so the text is the start of an object, a prefix
      // of a JSON document even when max_tokens cuts it off, and whole when it stops.
      const j = await openai.completions.create({ model: 'sim', prompt: 'json', max_tokens: 48,
        response_format: { type: 'json_object' } });
      assert.ok(['length', 'stop'].includes(j.choices[0].finish_reason), j.choices[0].finish_reason);
      assert.equal(j.choices[0].text.trimStart()[0], '{', j.choices[0].text);
      if (j.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(j.choices[0].text), 'object');
      const answers = [j.choices[0]];
      // Structured outputs: a json_schema (enum, const, integer, nested object, array caps)
      // on chat and completions; the text is a prefix of a valid document, and whole when it stops.
      const schema = { type: 'object', additionalProperties: false, required: ['kind', 'n', 'v'],
        properties: { kind: { enum: ['a', 'bb'] }, n: { type: 'integer' }, v: { const: 2 },
          inner: { type: 'object', properties: { ok: { type: 'boolean' } }, additionalProperties: false },
          list: { type: 'array', items: { type: ['null', 'boolean'] }, maxItems: 2 } } };
      const format = { type: 'json_schema', json_schema: { name: 'thing', schema, strict: true } };
      for (const call of [
        () => openai.completions.create({ model: 'sim', prompt: 'json', max_tokens: 64, response_format: format }),
        () => openai.chat.completions.create({ model: 'sim', max_tokens: 64, response_format: format,
          messages: [{ role: 'user', content: 'json' }] }),
      ]) {
        const r = await call();
        const text = r.choices[0].text ?? r.choices[0].message.content;
        assert.ok(['length', 'stop'].includes(r.choices[0].finish_reason), r.choices[0].finish_reason);
        assert.equal(text.trimStart()[0], '{', text);
        assert.doesNotMatch(text, /"(?!kind|n|v|inner|list|ok|a|bb)[^"]*"\s*:/, text);
        if (r.choices[0].finish_reason === 'stop') {
          const value = JSON.parse(text);
          assert.ok(['a', 'bb'].includes(value.kind) && Number.isInteger(value.n) && value.v === 2, text);
        }
        answers.push({ text, finish_reason: r.choices[0].finish_reason });
      }
      assertJsonPrefixes(answers);
      await assert.rejects(openai.chat.completions.create({ model: 'sim', max_tokens: 8, stream: true,
        messages: [{ role: 'user', content: 'json' }],
        response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', format: 'date' } } },
      }), (e) => {
        assert.equal(e.status, 400);
        assert.match(e.message, /unsupported keyword 'format' at \$/);
        return true;
      });
    } finally {
      await server.stop();
    }
  },

  async 'flags without effect on the chosen device are refused at start'(ctx) {
    for (const [args, message] of [
      [['--device', 'cpu', '--gpu-memory-utilization', '0.5'], /--gpu-memory-utilization has no effect/],
      // On the CPU the ranks are threads; 3 does not split the model's 8 heads.
      [['--device', 'cpu', '--tensor-parallel-size', '3'],
        /--tensor-parallel-size 3 must divide the model's num_attention_heads \(8\)/],
      [['--device', 'cpu', '-tp', '3'], /--tensor-parallel-size 3 must divide the model's num_attention_heads \(8\)/],
      [['--device', 'sim', '--enable-expert-parallel'], /--enable-expert-parallel needs --tensor-parallel-size > 1/],
      [['--device', 'sim', '--sim-profile', 'llama-3-8b', '-tp', '2', '--enable-expert-parallel'],
        /--expert-parallel: llama-3-8b is a dense model/],
      // As `sluice plan` says: 309 GB of weights on one 141 GB GPU.
      [['--device', 'sim', '--sim-profile', 'deepseek-v4.1-flash'],
        /deepseek-v4.1-flash does not fit on 1 x H200.* \(--tensor-parallel-size 1\): weights 308.9 GB .*short by 193.8 GB/],
      [['--device', 'cpu', '--sim-speed', '2'], /--sim-speed has no effect without --device sim/],
      [['--device', 'sim', '--threads', '2'], /--threads has no effect with --device sim/],
      [['--device', 'sim', '--sim-profile', 'no-such-model'], /--sim-profile no-such-model: unknown/],
      [['--device', 'sim', '--cuda-prefill-attention', 'wgmma-ws'],
        /--cuda-prefill-attention has no effect with --device sim/],
      [['--device', 'cpu', '--no-cuda-pdl'], /--cuda-pdl has no effect with --device cpu/],
      [['--device', 'cpu', '--cuda-prefill-attention', 'v1'], /--cuda-prefill-attention/],
      // Deleted in session 42 (wgmma_ws replaced it): refused at start, not silently mapped.
      [['--device', 'cpu', '--cuda-prefill-attention', 'wgmma'],
        /--cuda-prefill-attention: wgmma not in \{mma,wgmma-ws,cudnn,auto\}/],
      [['--device', 'sim', '--cuda-decode-split-plan', 'by-step-work'],
        /--cuda-decode-split-plan has no effect with --device sim/],
      [['--device', 'cpu', '--cuda-gemm-sm-count-target'], /--cuda-gemm-sm-count-target has no effect with --device cpu/],
      [['--device', 'sim', '--no-cuda-gemm-sm-count-target'], /--cuda-gemm-sm-count-target has no effect with --device sim/],
      [['--device', 'cuda', '--decode-lane', 'off', '--cuda-gemm-sm-count-target'],
        /--cuda-gemm-sm-count-target .*it needs --decode-lane sms:N \(the decode lane here is off\)/],
      [['--device', 'cpu', '--kv-offloading-eviction', 'adaptive-reuse'],
        /--kv-offloading-eviction have no effect without --kv-offloading-size/],
      [['--device', 'cpu', '--kv-offloading-size', '1', '--kv-offloading-eviction', 'fifo'],
        /unknown eviction policy 'fifo'/],
      [['--device', 'cpu', '--kv-offloading-size', '1', '--kv-offloading-eviction', 'prefix-aware'],
        /--kv-offloading-eviction: the host KV tier evicts lru, slru, reuse-history or adaptive-reuse/],
      // --decode-lane auto is one loop on the CPU: nothing to pace.
      [['--device', 'cpu', '--decode-lane-interval-ms', '40'], /--decode-lane-interval-ms .*it needs --decode-lane/],
      [['--device', 'cpu', '--decode-lane-max-context', '4096'], /--decode-lane-max-context .*it needs --decode-lane/],
      [['--device', 'cpu', '--decode-lane', 'stream', '--max-token-gap-ms', '150'],
        /--max-token-gap-ms has no effect with --decode-lane stream/],
      [['--device', 'cpu', '--max-token-gap-ms', '20'], /--max-token-gap-ms must be 0 \(3 x --max-step-ms\) or >= --max-step-ms/],
      // The pace is device time: an unpaced sim has none on the wall clock.
      [['--device', 'sim', '--sim-profile', 'llama-3-8b', '--decode-lane', 'sms:16', '--sim-speed', '0',
        '--decode-lane-interval-ms', '40'], /the sim needs --sim-speed > 0/],
    ]) {
      const r = spawnSync(ctx.sluice, ['serve', '--model', ctx.modelDir, '--port', '0', ...args],
        { encoding: 'utf8', timeout: 30_000 });
      assert.notEqual(r.status, 0, `${args.join(' ')} was accepted`);
      assert.match(r.stdout + r.stderr, message);
    }
  },

  // A kernel loaded lazily while serving stalled the decode lane (S18); the
  // rule is auto's own, decided before any CUDA call (so it shows without a GPU).
  async 'on cuda, kernels load before serving wherever two step loops may run'(ctx) {
    const eager = /CUDA kernels load before serving \(CUDA_MODULE_LOADING=EAGER/;
    for (const [args, expected] of [
      [[], true],
      [['--decode-lane', 'sms:16'], true],
      [['--decode-lane', 'off'], false],
      [['--max-step-ms', '50'], false],
      [['--scheduling-policy', 'prefill-first'], false],
    ]) {
      const r = spawnSync(ctx.sluice, ['serve', '--model', ctx.modelDir, '--port', '0', '--device', 'cuda',
        '--check-only', ...args], { encoding: 'utf8', timeout: 60_000 });
      const out = r.stdout + r.stderr;
      assert.equal(eager.test(out), expected, `${args.join(' ') || '(defaults)'}:\n${out}`);
    }
  },

  async 'the sim replays an 8-GPU expert-parallel launch with the KV cache its memory plan leaves'(ctx) {
    const plan = spawnSync(ctx.sluice, ['plan', '--profile', 'deepseek-v4.1-flash', '--gpus', '8',
      '--enable-expert-parallel', '--max-model-len', '131072'], { encoding: 'utf8', timeout: 30_000 });
    assert.equal(plan.status, 0, plan.stdout + plan.stderr);
    const blocks = plan.stdout.match(/KV capacity +\d+ tokens \((\d+) blocks of 16\)/);
    assert.ok(blocks, plan.stdout);
    const r = spawnSync(ctx.sluice, ['serve', '--model', ctx.modelDir, '--port', '0', '--device', 'sim',
      '--sim-profile', 'deepseek-v4.1-flash', '--tensor-parallel-size', '8', '--enable-expert-parallel',
      '--max-model-len', '131072', '--check-only'], { encoding: 'utf8', timeout: 30_000 });
    const out = r.stdout + r.stderr;
    assert.equal(r.status, 0, out);
    assert.match(out, /roofline \(deepseek-v4.1-flash on 8 x H200.*, tensor parallel 8, expert parallel 8\)/);
    assert.match(out, new RegExp(`sim: ${blocks[1]} KV blocks of 16 tokens \\(the memory plan`));
  },
};
