// Lints an OpenAPI document with Redocly's recommended rules and prints every problem as one
// JSON array of {ruleId, severity, message, pointer} on stdout.
import { readFileSync } from 'node:fs';
import { createConfig, lintFromString } from '@redocly/openapi-core';

const file = process.argv[2];
const config = await createConfig({ extends: ['recommended'] });
const problems = await lintFromString({ source: readFileSync(file, 'utf8'), absoluteRef: file, config });
console.log(JSON.stringify(problems.map((p) => ({
  ruleId: p.ruleId,
  severity: p.severity,
  message: p.message,
  pointer: p.location?.[0]?.pointer ?? '',
}))));
