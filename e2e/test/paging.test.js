'use strict';
// The client's auto-paging over more than 100 objects returns every object exactly once. Runs in
// an account of its own (EDGEPLANE_E2E_PAGING_TOKEN), so the counts are exact while the other
// test files create objects in parallel.

const { describe, it, before } = require('node:test');
const assert = require('node:assert/strict');
const h = require('../lib/harness');

const TOKEN = h.env('EDGEPLANE_E2E_PAGING_TOKEN');
const ng = h.client(TOKEN);
const N = 150;
let ids = []; // newest first, as lists are ordered

// requestsSince returns the list requests made after mark (an index into h.requests).
function listRequestsSince(mark) {
  return h.requests.slice(mark).filter(r => r.method === 'GET' && new URL(r.url).pathname.endsWith('/ip_policies'));
}

function assertEveryOnce(got, want) {
  const gotIds = got.map(o => o.id);
  assert.equal(new Set(gotIds).size, gotIds.length, 'an object was returned twice');
  assert.deepEqual(gotIds, want, 'not every object, or not newest first');
}

describe('paging through the client', () => {
  before(async () => {
    // Seed through the API, 10 requests at a time.
    const created = [];
    for (let i = 0; i < N; i += 10) {
      const batch = [];
      for (let j = i; j < Math.min(N, i + 10); j++) {
        batch.push(h.raw('POST', '/ip_policies', { description: `p${j}` }, { token: TOKEN }));
      }
      for (const r of await Promise.all(batch)) {
        assert.equal(r.status, 201, r.text);
        created.push(r.json.id);
      }
    }
    ids = created.sort().reverse(); // ids are time-ordered KSUIDs: newest first is descending
  });

  it(`list() with the default limit returns all ${N} exactly once, in two pages`, async () => {
    const mark = h.requests.length;
    const all = await ng.ipPolicies.list();
    assertEveryOnce(all, ids);
    const reqs = listRequestsSince(mark);
    assert.equal(reqs.length, 2, reqs.map(r => r.url).join('\n'));
    const second = new URL(reqs[1].url);
    // The client sends its own spelling of the cursor, beforeId, which edgeplane accepts.
    assert.equal(second.searchParams.get('beforeId'), ids[99]);
    assert.equal(second.searchParams.get('limit'), '100');
  });

  it('the client\'s async iterator with limit 7 pages 22 times and yields each object once', async () => {
    const mark = h.requests.length;
    const got = [];
    // _asyncList is the generator behind list() (private in the client's types, public in JS).
    for await (const p of ng.ipPolicies._asyncList(undefined, '7')) got.push(p);
    assertEveryOnce(got, ids);
    assert.equal(listRequestsSince(mark).length, Math.ceil(N / 7));
  });

  it('a limit that divides the count: the last full page ends the paging (no empty page asked for)', async () => {
    const mark = h.requests.length;
    const all = await ng.ipPolicies.list(undefined, '10');
    assertEveryOnce(all, ids);
    assert.equal(listRequestsSince(mark).length, N / 10);
  });

  it('list(beforeId) starts after the cursor', async () => {
    const all = await ng.ipPolicies.list(ids[119], '25');
    assertEveryOnce(all, ids.slice(120));
  });

  it('next_page_uri on the wire: absolute under the base URL, null on the last page', async () => {
    const first = await h.raw('GET', '/ip_policies?limit=100', undefined, { token: TOKEN });
    assert.equal(first.json.next_page_uri, `${h.BASE_URL}/ip_policies?before_id=${ids[99]}&limit=100`);
    const second = await h.raw('GET', first.json.next_page_uri, undefined, { token: TOKEN });
    assert.equal(second.json.ip_policies.length, N - 100);
    assert.equal(second.json.next_page_uri, null);
  });
});
