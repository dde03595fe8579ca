'use strict';
// The README's deviation table and lib/deviations.js (what the validator tolerates) must say the
// same thing: every row the code generates is in the README verbatim, and the table has no other
// rows. No server needed.

const { it } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { markdownRows } = require('../lib/deviations');

it('the README lists exactly the deviations the validator allows', () => {
  const readme = fs.readFileSync(path.join(__dirname, '..', '..', 'README.md'), 'utf8');
  const start = readme.indexOf('\n## Compatibility');
  assert.ok(start >= 0, 'README.md has no "## Compatibility" section');
  const end = readme.indexOf('\n## ', start + 1);
  const section = readme.slice(start, end < 0 ? undefined : end);
  const marker = section.indexOf('\n### Deviations from the schema');
  assert.ok(marker >= 0, 'the Compatibility section has no "### Deviations from the schema" subsection');
  const lines = section.slice(marker).split('\n');
  const first = lines.findIndex(l => l.startsWith('|'));
  const table = [];
  for (let i = first; i < lines.length && lines[i].startsWith('|'); i++) table.push(lines[i]);
  const rows = table.slice(2); // header and separator
  assert.deepEqual(rows, markdownRows(), 'update the README table from `node e2e/lib/deviations.js`');
});
