// Tokenization runs off the HTTP threads: with one HTTP thread, /health sent
// while a ~1.5M-character prompt is being parsed and tokenized is answered
// before that prompt's own response. With tokenization on the HTTP thread
// the health check would queue behind it. Ordering, not time, is asserted.
import assert from 'node:assert/strict';
import http from 'node:http';
import { spawnServer } from './helpers.mjs';

export const tests = {
  async 'one HTTP thread stays responsive while a huge prompt is tokenized'(ctx) {
    const server = await spawnServer(ctx, ['--model', ctx.modelDir, '--served-model-name', 'tiny', '--api-threads', '1',
      '--threads', '1', '--max-model-len', '4096', '--kv-cache-memory', String(16 << 20),
      '--max-request-body-bytes', String(16 << 20)]);
    try {
      const url = new URL(server.baseURL);
      let words = '';
      for (let i = 0; words.length < 1_500_000; ++i) words += `word${i % 9973} `;
      const body = JSON.stringify({ model: 'tiny', prompt: words, max_tokens: 1 });
      const order = [];
      const big = new Promise((resolve, reject) => {
        const req = http.request({ host: url.hostname, port: url.port, path: '/v1/completions', method: 'POST',
          headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
          let text = '';
          res.on('data', (d) => { text += d; });
          res.on('end', () => { order.push('big'); resolve({ status: res.statusCode, text }); });
        });
        req.on('error', reject);
        // Once the whole body is on the socket, the server is parsing and tokenizing it.
        req.on('finish', () => {
          fetch(`${server.baseURL}/health`).then((r) => { order.push(`health ${r.status}`); }, reject);
        });
        req.end(body);
      });
      const result = await big;
      // The prompt is far beyond the 4096-token context: refused after tokenization.
      assert.equal(result.status, 400, result.text);
      assert.equal(JSON.parse(result.text).error.code, 'context_length_exceeded');
      for (let i = 0; i < 250 && order.length < 2; ++i) await new Promise((r) => setTimeout(r, 20));
      assert.deepEqual(order, ['health 200', 'big']);
    } finally {
      await server.stop();
    }
  },
};
