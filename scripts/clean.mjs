#!/usr/bin/env node
// `node scripts/clean.mjs DIR...`: removes build output before a build, so a file deleted from
// src/ can never linger in dist/ and ship in the tarball. Portable (no `rm -rf` in npm scripts).
import { rmSync } from 'node:fs';

for (const dir of process.argv.slice(2)) rmSync(dir, { recursive: true, force: true });
