'use strict';
// The deviation table of docs/api.md ("Compatibility") and lib/deviations.js (what the validator
// tolerates) must say the same thing: every row the code generates is in docs/api.md verbatim, and
// the table has no other rows. No server needed.

const { it } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { markdownRows } = require('../lib/deviations');

it('docs/api.md lists exactly the deviations the validator allows', () => {
  const doc = fs.readFileSync(path.join(__dirname, '..', '..', 'docs', 'api.md'), 'utf8');
  const start = doc.indexOf('\n## Compatibility');
  assert.ok(start >= 0, 'docs/api.md has no "## Compatibility" section');
  const end = doc.indexOf('\n## ', start + 1);
  const section = doc.slice(start, end < 0 ? undefined : end);
  const marker = section.indexOf('\n### Deviations from the schema');
  assert.ok(marker >= 0, 'the Compatibility section has no "### Deviations from the schema" subsection');
  const lines = section.slice(marker).split('\n');
  const first = lines.findIndex(l => l.startsWith('|'));
  const table = [];
  for (let i = first; i < lines.length && lines[i].startsWith('|'); i++) table.push(lines[i]);
  const rows = table.slice(2); // header and separator
  assert.deepEqual(rows, markdownRows(), 'update the table of docs/api.md from `node e2e/lib/deviations.js`');
});
