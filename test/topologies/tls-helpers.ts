/**
 * Shared by the TLS topology tests: the servers and certificates of scripts/services/tls.mjs
 * (plain JavaScript, loaded by URL), and one round trip through a store (migrate, claim,
 * read back, release) that proves the connection carries leasehold's real calls.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { openStore } from '../../src/backends/index.js';

/** dist/test/topologies/ -> the repository root. */
export const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

export interface Certs {
  dir: string;
  ca: string;
  otherCa: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
}

export interface Server {
  stop(): Promise<void>;
}

interface TlsModule {
  makeCerts(dir: string): Certs;
  startEtcdTls(o: { dir: string; port: number; certs: Certs }): Promise<Server & { endpoint: string }>;
  startRedisTls(o: { dir: string; port: number; certs: Certs; requireClientCert?: boolean }): Promise<Server>;
  startPostgresSsl(o: { dir: string; port: number; certs: Certs }): Promise<Server>;
}

export async function tlsServices(): Promise<TlsModule> {
  return (await import(pathToFileURL(join(ROOT, 'scripts', 'services', 'tls.mjs')).href)) as TlsModule;
}

/** A fresh temp dir with a CA, server and client certificates made by openssl. */
export async function freshCerts(): Promise<Certs> {
  const dir = mkdtempSync(join(tmpdir(), 'lh-tls-'));
  return (await tlsServices()).makeCerts(dir);
}

export const randomName = (p: string): string => `${p}${randomBytes(5).toString('hex')}`;

/** migrate, claim, read the term back, release: the calls a holder makes, over this URL. */
export async function roundTrip(url: string): Promise<bigint> {
  const store = await openStore(url);
  try {
    await store.migrate();
    const name = randomName('tls-');
    const [r] = await store.claim([{ name, holder: 'h1', ttlMs: 5000, expect: null, nextNonce: 'n1' }]);
    assert.equal(r?.outcome, 'acquired', `claim over ${url}: ${JSON.stringify(r, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v))}`);
    const [info] = await store.list({ name });
    assert.equal(info?.holder, 'h1');
    assert.equal(await store.release({ name, holder: 'h1', expect: ['n1'] }), true);
    return (r as { token: bigint }).token;
  } finally {
    await store.close();
  }
}

/** The first call's error, opening the store included (a bad file is refused at open). */
export async function firstError(url: string): Promise<Error> {
  let store;
  try {
    store = await openStore(url);
    await store.schemaStatus();
  } catch (err) {
    return err as Error;
  } finally {
    await store?.close();
  }
  assert.fail(`expected ${url} to fail`);
}

/** `leasehold <args>` as a subprocess, for the CLI's view of the same URLs. */
export function cli(args: string[], timeoutMs = 30_000): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [join(ROOT, 'bin', 'leasehold.js'), ...args], { stdio: ['ignore', 'pipe', 'pipe'], timeout: timeoutMs });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    p.on('error', reject);
    p.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}
