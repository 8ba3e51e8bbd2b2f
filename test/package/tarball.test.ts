/**
 * The package as a user gets it: `npm pack` on a tree with no build output (as a fresh clone
 * has), then `npm install` of the tarball into an app outside the repository, then the CLI,
 * `import`, `require()` and a TypeScript `nodenext` build against the shipped types, on a real
 * PostgreSQL. This is the test that would have caught a tarball without `dist/`.
 *
 * It runs in the parallel phase. Its npm installs and TypeScript builds take about 90 s of CPU over
 * two minutes, most of one core: less than the two CPU hogs the suite must pass beside (stress-ng
 * --cpu 2, docs/testing.md), and run alone at the end it added its whole two minutes to npm test.
 *
 * better-sqlite3's install script downloads a prebuilt binary from GitHub, which this machine
 * cannot reach, and then builds from source (80s of one core in CI). The test serves the
 * binary the repository's own install built, for the same better-sqlite3 version and Node ABI,
 * from a loopback HTTP "mirror" (prebuild-install's documented *_binary_host setting): the
 * app's install takes the same prebuilt path a user's does. Any other version gets a 404 and
 * is built from source as before.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { TEST_PG_URL } from '../helpers/stores.js';

// Compiled to dist/test/package/: the repository root is three levels up.
const root = fileURLToPath(new URL('../../../', import.meta.url));

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

function sh(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = {}, timeoutMs = 300_000): Promise<Result> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
    child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
    const guard = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('exit', (code) => {
      clearTimeout(guard);
      resolve({ code, stdout, stderr, ms: Date.now() - started });
    });
  });
}

const show = (r: Result): string => `exit ${r.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`;

// Quiet, reproducible npm: no audit/fund chatter, the registry cache first.
const NPM_FLAGS = ['--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error'];

interface Packed {
  filename: string;
  size: number;
  unpackedSize: number;
  entryCount: number;
  files: { path: string }[];
}

void describe('the packed package, installed into an app outside the repository', () => {
  let work: string;
  let app: string;
  let packed: Packed;
  let tarball: string;
  const schema = `lh_pack_${process.pid}`;
  const storeUrl = `${TEST_PG_URL}${TEST_PG_URL.includes('?') ? '&' : '?'}schema=${schema}`;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'leasehold-pack-'));
    // What a fresh clone has: sources, no dist/. node_modules is the repo's (typescript for prepack).
    const stage = join(work, 'stage');
    for (const f of ['package.json', 'tsconfig.json', 'tsconfig.build.json', 'README.md', 'LICENSE', 'src', 'bin', 'scripts', 'docs']) {
      if (existsSync(join(root, f))) cpSync(join(root, f), join(stage, f), { recursive: true });
    }
    symlinkSync(join(root, 'node_modules'), join(stage, 'node_modules'), 'dir');
    const pack = await sh('npm', ['pack', '--json', '--pack-destination', work, ...NPM_FLAGS], stage);
    assert.equal(pack.code, 0, show(pack));
    packed = (JSON.parse(pack.stdout.slice(pack.stdout.indexOf('['))) as Packed[])[0]!;
    tarball = join(work, packed.filename);

    app = join(work, 'app');
    mkdirSync(app);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'pack-test-app', private: true, type: 'module' }, null, 2));
  });

  after(async () => {
    const c = new pg.Client({ connectionString: TEST_PG_URL });
    await c.connect();
    await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await c.end();
    if (work !== undefined) rmSync(work, { recursive: true, force: true });
  });

  void it('ships the compiled code, the types, the CLI and every file the README links to, and no tests', () => {
    const paths = new Set(packed.files.map((f) => f.path));
    for (const p of ['dist/src/index.js', 'dist/src/index.d.ts', 'dist/src/fence/index.js', 'dist/src/fence/index.d.ts', 'dist/src/cli/main.js', 'bin/leasehold.js', 'README.md']) {
      assert.ok(paths.has(p), `${p} is not in the tarball`);
    }
    assert.deepEqual([...paths].filter((p) => p.startsWith('dist/test/') || p.startsWith('dist/bench/') || p.startsWith('test/')), []);
    const readme = readFileSync(join(root, 'README.md'), 'utf8');
    const links = [...readme.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)].map((m) => m[1]!).filter((l) => !/^[a-z]+:/.test(l));
    const backticked = [...readme.matchAll(/`((?:src|docs)\/[\w./-]+\.(?:ts|md))`/g)].map((m) => m[1]!);
    assert.ok(links.length > 0, 'the README links to no files: this check would prove nothing');
    for (const l of [...links, ...backticked]) assert.ok(paths.has(l), `the README points at ${l}, which the tarball does not ship`);
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { engines: { node: string } };
    // require() of an ES module without a flag arrived in Node 20.19, node:sqlite without one in
    // 22.13; the versions listed are the ones CI tests (.ci/run, scripts/node-versions.mjs).
    assert.match(pkg.engines.node, /^\^20\.19\.0 \|\| \^22\.13\.0 \|\| \^24\.0\.0$/);
    process.stdout.write(`# tarball: ${packed.entryCount} files, ${(packed.size / 1024).toFixed(0)} KiB packed, ${(packed.unpackedSize / 1024).toFixed(0)} KiB unpacked\n`);
  });

  void it('installs without building anything when optional dependencies are left out, and the CLI and imports work', async () => {
    const install = await sh('npm', ['install', '--omit=optional', ...NPM_FLAGS, tarball, 'pg@8'], app);
    assert.equal(install.code, 0, show(install));
    process.stdout.write(`# npm install of the tarball + pg without optional dependencies (no SQLite, no compiler): ${(install.ms / 1000).toFixed(1)}s\n`);
    assert.equal(existsSync(join(app, 'node_modules', 'better-sqlite3')), false, 'better-sqlite3 was installed although optional dependencies were omitted');

    const help = await sh('npx', ['--no-install', 'leasehold', '--help'], app);
    assert.equal(help.code, 0, show(help));
    assert.match(help.stdout, /leasehold run --name NAME/);

    const version = await sh('npx', ['--no-install', 'leasehold', '--version'], app);
    assert.equal(version.stdout.trim(), (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string }).version);

    // Asking for the embedded store without its driver: one line that names the package.
    const sqlite = await sh('npx', ['--no-install', 'leasehold', 'status', '--store', `sqlite:${join(work, 'x.db')}`], app);
    assert.notEqual(sqlite.code, 0, show(sqlite));
    assert.match(sqlite.stderr, /better-sqlite3/, show(sqlite));
    assert.equal(sqlite.stderr.trim().split('\n').length, 1, show(sqlite));

    const migrate = await sh('npx', ['--no-install', 'leasehold', 'migrate', '--store', storeUrl], app);
    assert.equal(migrate.code, 0, show(migrate));

    writeFileSync(
      join(app, 'esm.mjs'),
      `import pg from 'pg';
import { Leasehold, openStore, LeaseLostError } from 'leasehold';
import { fencedTransaction, idempotencyKey } from 'leasehold/fence';
const [url, schema] = process.argv.slice(2);
const leasehold = new Leasehold({ store: await openStore(url), closeStore: true });
const pool = new pg.Pool({ connectionString: url.replace(/[?].*$/, '') });
const token = await leasehold.runExclusive('pack-esm', async ({ token }) => {
  await fencedTransaction(pool, { resource: 'pack', token, table: schema + '.fences' }, async (tx) => {
    await tx.query('SELECT 1');
  });
  return token;
});
await pool.end();
await leasehold.close();
// The integrations load without their optional peers (node-cron, NestJS: type-only imports).
const { leaseholdCoordinator } = await import('leasehold/node-cron');
const { OncePerSlot, LeaseholdModule } = await import('leasehold/nestjs');
const { runOncePer, openScheduling } = await import('leasehold/scheduler');
const integrations = [leaseholdCoordinator, OncePerSlot, LeaseholdModule, runOncePer, openScheduling].map((f) => typeof f).join(',');
console.log(JSON.stringify({ token: String(token), key: idempotencyKey('pack-esm', token), lost: typeof LeaseLostError, integrations }));
`,
    );
    const esm = await sh(process.execPath, ['esm.mjs', storeUrl, schema], app);
    assert.equal(esm.code, 0, show(esm));
    const e = JSON.parse(esm.stdout) as { token: string; key: string; lost: string; integrations: string };
    assert.equal(e.integrations, 'function,function,function,function,function');
    assert.match(e.token, /^\d+$/);
    assert.equal(e.key, `leasehold:pack-esm:${e.token}`);
    assert.equal(e.lost, 'function');

    writeFileSync(
      join(app, 'cjs.cjs'),
      `const { Leasehold, openStore } = require('leasehold');
const { idempotencyKey } = require('leasehold/fence');
(async () => {
  const leasehold = new Leasehold({ store: await openStore(process.argv[2]), closeStore: true });
  const token = await leasehold.runExclusive('pack-cjs', ({ token }) => token);
  await leasehold.close();
  console.log(idempotencyKey('pack-cjs', token));
})().catch((err) => { console.error(err); process.exitCode = 1; });
`,
    );
    const cjs = await sh(process.execPath, ['cjs.cjs', storeUrl], app);
    assert.equal(cjs.code, 0, show(cjs));
    assert.match(cjs.stdout.trim(), /^leasehold:pack-cjs:\d+$/);
    assert.equal(cjs.stderr, '', 'require() of the package printed warnings');
  });

  void it('type-checks a TypeScript nodenext app against the shipped types, with skipLibCheck off', async () => {
    // The ORM fence entries (issue 26) and the schedule integrations (issue 27) type-check against
    // each library's own types, so the app has them all.
    const orms = ['kysely@0.28', 'knex@3', 'drizzle-orm@0.45', 'postgres@3', 'typeorm@1', 'sequelize@6'];
    const schedulers = ['node-cron@4', '@nestjs/common@12', '@nestjs/core@12', '@nestjs/schedule@12', 'reflect-metadata@0.2', 'rxjs@7'];
    const install = await sh('npm', ['install', '--omit=optional', ...NPM_FLAGS, 'typescript@5.9', '@types/node@20', '@types/pg@8', 'prom-client@15', ...orms, ...schedulers], app);
    assert.equal(install.code, 0, show(install));
    writeFileSync(
      join(app, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: { module: 'nodenext', moduleResolution: 'nodenext', target: 'es2022', strict: true, skipLibCheck: false, noEmit: true, types: ['node'] },
        include: ['app.ts'],
      }),
    );
    writeFileSync(
      join(app, 'app.ts'),
      `import pg from 'pg';
import { Leasehold, openStore, LeaseLostError, ConfigError, type Term, type LeaseOptions, type LeaseStore } from 'leasehold';
import { fencedTransaction, idempotencyKey, FencedError } from 'leasehold/fence';
import { runConformance } from 'leasehold/conformance';
import { registerMetrics } from 'leasehold/metrics';
import { registerOtelMetrics } from 'leasehold/metrics/otel';
import { healthCheck } from 'leasehold/health';
import { observe } from 'leasehold/observe';
import { MemoryStore, snapshotLease } from 'leasehold/testing';
import { Agent, OwnerCache, openFleet } from 'leasehold/fleet';
import { startCron, cronSchedule, SqliteSlotLedger, PostgresSlotLedger, runOncePer, openScheduling, SlotGate, type SlotLedgerPort, type OncePerResult } from 'leasehold/scheduler';
import { leaseholdCoordinator, type LeaseholdCoordinator } from 'leasehold/node-cron';
import { LeaseholdModule, OncePerSlot, Exclusive, currentSlot, currentTerm, type SlotRun } from 'leasehold/nestjs';
import type { RunCoordinator } from 'node-cron';
import type { DynamicModule } from '@nestjs/common';
import * as kyselyFence from 'leasehold/fence/kysely';
import * as knexFence from 'leasehold/fence/knex';
import * as drizzleFence from 'leasehold/fence/drizzle';
import * as postgresFence from 'leasehold/fence/postgres';
import * as typeormFence from 'leasehold/fence/typeorm';
import * as sequelizeFence from 'leasehold/fence/sequelize';
import type { Kysely } from 'kysely';
import type { Knex } from 'knex';
import type { NodePgDatabase } from 'drizzle-orm/node-postgres';
import type { Sql } from 'postgres';
import type { DataSource } from 'typeorm';
import type { Sequelize } from 'sequelize';

// Every public entry's types load with skipLibCheck off (a type stripped from one .d.ts but
// named by another shows up here, not in the repository's own build).
export const entries = [runConformance, registerMetrics, registerOtelMetrics, healthCheck, observe, MemoryStore, snapshotLease, Agent, OwnerCache, openFleet, startCron, cronSchedule, SqliteSlotLedger, PostgresSlotLedger, SlotGate, currentSlot, OncePerSlot, Exclusive, currentTerm];

// The integrations' types fit the frameworks' own: a node-cron RunCoordinator, a Nest DynamicModule.
export const coordinator: RunCoordinator = leaseholdCoordinator({ store: 'sqlite::memory:' }) satisfies LeaseholdCoordinator;
export const nestModule: DynamicModule = LeaseholdModule.forRoot({ store: 'postgres://localhost/app', ttl: '15s' });
export async function oncePer(leasehold: Leasehold, ledger: SlotLedgerPort): Promise<OncePerResult<bigint>> {
  const { close } = await openScheduling({ leasehold, ledger });
  await close();
  return runOncePer('k', ({ token }: { token: bigint }) => token, { leasehold, ledger, name: 'n' });
}
export const slotToken = (run: SlotRun): bigint => run.token;

export async function main(url: string, pool: pg.Pool): Promise<bigint> {
  const store: LeaseStore = await openStore(url);
  const leasehold = new Leasehold({ store, closeStore: true });
  const options: LeaseOptions = { ttl: '30s' };
  const lease = leasehold.lease('typed', options);
  const term: Term = await lease.acquire({ wait: false });
  term.signal.addEventListener('abort', () => {
    const why: unknown = term.signal.reason;
    if (why instanceof LeaseLostError) console.log(why.reason);
  });
  try {
    const rows = await fencedTransaction(pool, { resource: 'r', token: term.token }, async (tx) => {
      const r = await tx.query<{ id: number }>('SELECT 1 AS id');
      return r.rows.map((row) => row.id);
    });
    console.log(rows, idempotencyKey('typed', term.token));
  } catch (err) {
    if (err instanceof FencedError || err instanceof ConfigError) throw err;
  }
  await lease.release();
  await leasehold.close();
  return term.token;
}

// Each ORM entry: fn's argument is the library's own transaction type, with no cast.
export async function orms(k: Kysely<{ t: { id: number } }>, kn: Knex, d: NodePgDatabase, sql: Sql, ds: DataSource, sq: Sequelize, term: Term): Promise<void> {
  const o = { resource: 'r', term };
  await kyselyFence.fencedTransaction(k, o, async (trx) => trx.selectFrom('t').select('id').execute());
  await knexFence.fencedTransaction(kn, o, async (trx) => trx('t').insert({ id: 1 }));
  await drizzleFence.fencedTransaction(d, o, async (tx) => tx.transaction(async () => undefined));
  await postgresFence.fencedTransaction(sql, o, async (tx) => tx\`SELECT 1\`);
  await typeormFence.fencedTransaction(ds, o, async (manager) => manager.query('SELECT 1'));
  await sequelizeFence.fencedTransaction(sq, o, async (transaction) => transaction.afterCommit(() => undefined));
  await kyselyFence.createPgFenceTable(new pg.Pool());
}

// The engine's plumbing is not in the shipped types (stripInternal): each line must fail to compile.
export function internals(leasehold: Leasehold, lease: ReturnType<Leasehold['lease']>): void {
  // @ts-expect-error enroll is the scheduler's
  leasehold.enroll(lease);
  // @ts-expect-error waitForFreed is the followers'
  void leasehold.waitForFreed('x', new AbortController().signal);
  // @ts-expect-error noteStoreAdvance is a detector's
  leasehold.noteStoreAdvance(1, 1, 1);
  // @ts-expect-error resume is for the testing entry only
  lease.resume({});
}
`,
    );
    const tsc = await sh(process.execPath, [join(app, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', '.'], app);
    // drizzle-orm's own declarations do not type-check with skipLibCheck off (they import the types
    // of every driver it supports, gel and mysql2 among them): its errors are its own. Any other
    // error (leasehold's .d.ts, app.ts) fails the test.
    const errors = tsc.stdout.split('\n').filter((l) => /error TS\d+/.test(l));
    const ours = errors.filter((l) => !l.startsWith('node_modules/drizzle-orm/'));
    assert.deepEqual(ours, [], show(tsc));
    assert.ok(tsc.code === 0 || errors.length > 0, show(tsc));

    // And every ORM entry loads from the tarball at run time, each with its own library only.
    writeFileSync(
      join(app, 'orm-entries.mjs'),
      `const names = ['kysely', 'knex', 'drizzle', 'postgres', 'typeorm', 'sequelize'];
const loaded = {};
for (const n of names) {
  const m = await import('leasehold/fence/' + n);
  loaded[n] = [typeof m.fencedTransaction, typeof m.fence, typeof m.createPgFenceTable, typeof m.FenceOwnedError].join(',');
}
console.log(JSON.stringify(loaded));
`,
    );
    const entries = await sh(process.execPath, ['orm-entries.mjs'], app);
    assert.equal(entries.code, 0, show(entries));
    const loaded = JSON.parse(entries.stdout) as Record<string, string>;
    for (const n of ['kysely', 'knex', 'drizzle', 'postgres', 'typeorm', 'sequelize']) assert.equal(loaded[n], 'function,function,function,function', `leasehold/fence/${n}: ${entries.stdout}`);
  });

  void it('compiles a decorated NestJS app (experimentalDecorators, emitDecoratorMetadata) against the tarball, and it runs a slot on PostgreSQL', async () => {
    // The previous test installed @nestjs/* and typescript into the app. A NestJS app's own
    // tsconfig: legacy decorators with their metadata, which leasehold/nestjs's decorators and
    // its @Inject(Leasehold) must compile under and run with.
    const dir = join(app, 'nest');
    mkdirSync(join(dir, 'src'), { recursive: true });
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          module: 'nodenext', moduleResolution: 'nodenext', target: 'es2022', strict: true, skipLibCheck: true,
          experimentalDecorators: true, emitDecoratorMetadata: true, outDir: 'dist', rootDir: 'src', types: ['node'],
        },
        include: ['src'],
      }),
    );
    writeFileSync(
      join(dir, 'src', 'main.ts'),
      `import 'reflect-metadata';
import { Inject, Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, ScheduleModule } from '@nestjs/schedule';
import { Leasehold } from 'leasehold';
import { LeaseholdModule, OncePerSlot, currentSlot } from 'leasehold/nestjs';

let ran: (line: string) => void;
const first = new Promise<string>((resolve) => (ran = resolve));

@Injectable()
class Reports {
  constructor(@Inject(Leasehold) private readonly leasehold: Leasehold) {}

  @Cron('* * * * * *')
  @OncePerSlot('pack-nest')
  report(): void {
    const { slot, token, signal } = currentSlot();
    ran(JSON.stringify({ slot, token: String(token), aborted: signal.aborted, holder: this.leasehold.holder }));
  }
}

@Module({ imports: [ScheduleModule.forRoot(), LeaseholdModule.forRoot({ store: process.argv[2]!, ttl: '10s' })], providers: [Reports] })
class AppModule {}

const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error', 'warn'] });
console.log(await first);
await app.close();
`,
    );
    const tsc = await sh(process.execPath, [join(app, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', dir], app);
    assert.equal(tsc.code, 0, show(tsc));
    // Startup, the lease and the next one-second slot: seconds; the guard only stops a hang.
    const run = await sh(process.execPath, [join(dir, 'dist', 'main.js'), storeUrl], app, {}, 60_000);
    assert.equal(run.code, 0, show(run));
    const slot = JSON.parse(run.stdout.trim()) as { slot: string; token: string; aborted: boolean; holder: string };
    assert.match(slot.token, /^\d+$/);
    assert.equal(slot.aborted, false);
    assert.notEqual(slot.holder, '', 'the injected Leasehold (emitDecoratorMetadata + @Inject) was not reachable from the job');
    const history = await sh('npx', ['--no-install', 'leasehold', 'cron', 'history', 'pack-nest', '--store', storeUrl, '--json'], app);
    assert.equal(history.code, 0, show(history));
    const rows = JSON.parse(history.stdout) as Array<{ slot: string; status: string; token: string }>;
    const row = rows.find((r) => r.slot === slot.slot);
    assert.equal(row?.status, 'succeeded', history.stdout);
    assert.equal(String(row.token), slot.token);
  });

  void it('with optional dependencies installed, runs `leasehold demo` on the embedded store', async () => {
    const mirror = await prebuildMirror(work);
    let install: Result;
    try {
      install = await sh('npm', ['install', ...NPM_FLAGS], app, mirror === undefined ? {} : { npm_config_better_sqlite3_binary_host: mirror.url }, 480_000);
    } finally {
      mirror?.server.close();
    }
    assert.equal(install.code, 0, show(install));
    const how = mirror?.served() === true ? 'prebuilt binary from the loopback mirror' : 'built from source here';
    process.stdout.write(`# npm install of the optional dependencies (better-sqlite3, ${how}): ${(install.ms / 1000).toFixed(1)}s\n`);
    const state = join(work, 'state');
    const env: NodeJS.ProcessEnv = { XDG_STATE_HOME: state, LEASEHOLD_STORE: '' };
    const demo = await sh('npx', ['--no-install', 'leasehold', 'demo'], app, env, 120_000);
    assert.equal(demo.code, 0, show(demo));
    assert.match(demo.stdout, /All 6 claims held/, show(demo));
    assert.ok(existsSync(join(state, 'leasehold', 'leasehold.db')), 'the demo did not use the embedded default store');
  });
});

/**
 * A loopback HTTP server answering prebuild-install's request for better-sqlite3's binary with
 * the one the repository's install built (same version, this Node's ABI), packed as a prebuild
 * tarball (build/Release/better_sqlite3.node). Undefined when the repository has none.
 */
async function prebuildMirror(work: string): Promise<{ server: Server; url: string; served(): boolean } | undefined> {
  const pkgDir = join(root, 'node_modules', 'better-sqlite3');
  if (!existsSync(join(pkgDir, 'build', 'Release', 'better_sqlite3.node'))) return undefined;
  const version = (JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8')) as { version: string }).version;
  const tgz = join(work, 'better-sqlite3-prebuild.tar.gz');
  const tar = spawnSync('tar', ['czf', tgz, '-C', pkgDir, 'build/Release/better_sqlite3.node']);
  if (tar.status !== 0) return undefined;
  // {name}-v{version}-{runtime}-v{abi}-{platform}{libc}-{arch}.tar.gz under /v{version}/
  const wanted = `/v${version}/better-sqlite3-v${version}-node-v${process.versions.modules}-${process.platform}`;
  let served = false;
  const server = createServer((req, res) => {
    if (req.method === 'GET' && req.url?.startsWith(wanted) === true && req.url.endsWith(`-${process.arch}.tar.gz`)) {
      served = true;
      res.writeHead(200, { 'content-type': 'application/gzip' });
      res.end(readFileSync(tgz));
    } else {
      res.writeHead(404).end();
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  return { server, url: `http://127.0.0.1:${port}`, served: () => served };
}
