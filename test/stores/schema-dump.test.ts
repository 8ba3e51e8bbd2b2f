/**
 * What the databases run, as a reviewed file: migrating an empty PostgreSQL schema (and an empty
 * SQLite file) gives exactly the checked-in schema.sql of the backend, functions and triggers
 * included, so a change to what leasehold's SQL does shows as a diff of that file. And a
 * database created by every earlier schema version, upgraded by `migrate()`, ends at the same
 * schema as a fresh one.
 *
 * After an intended change: LEASEHOLD_WRITE_SCHEMA=1 node scripts/test.mjs dist/test/stores/schema-dump.test.js
 * rewrites the files; review the diff.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { PostgresStore } from '../../src/backends/postgres/store.js';
import { SCHEMA_VERSION, channelFor, migrations } from '../../src/backends/postgres/schema.js';
import { SqliteStore } from '../../src/backends/sqlite/store.js';
import { MIGRATIONS as SQLITE_MIGRATIONS, SQLITE_SCHEMA_VERSION } from '../../src/backends/sqlite/schema.js';
import { loadSqliteDriver } from '../../src/backends/sqlite/driver.js';
import { TEST_PG_URL, selectedStores } from '../helpers/stores.js';

const repo = fileURLToPath(new URL('../../../', import.meta.url));
const WRITE = process.env['LEASEHOLD_WRITE_SCHEMA'] === '1';

/** Compares with the checked-in file (or rewrites it); on a difference, says where the actual dump is. */
function matchesFile(rel: string, actual: string): void {
  const path = join(repo, rel);
  if (WRITE) {
    writeFileSync(path, actual);
    return;
  }
  const expected = readFileSync(path, 'utf8');
  if (actual !== expected) {
    const out = join(tmpdir(), `leasehold-${rel.replace(/\W+/g, '-')}`);
    writeFileSync(out, actual);
    assert.fail(`the migrated schema differs from ${rel} (actual: ${out}; diff -u ${rel} ${out}). If the change is intended, rewrite it with LEASEHOLD_WRITE_SCHEMA=1 and review the diff`);
  }
}

async function pgDump(c: pg.Client, schema: string): Promise<string> {
  const q = async (sql: string): Promise<string[]> => (await c.query<{ line: string }>(sql, [schema])).rows.map((r) => r.line);
  const parts = [
    '-- tables and columns',
    ...(await q(`SELECT table_name || '.' || column_name || ' ' || data_type || CASE WHEN is_nullable = 'NO' THEN ' NOT NULL' ELSE '' END ||
                        COALESCE(' DEFAULT ' || column_default, '') AS line
                   FROM information_schema.columns WHERE table_schema = $1 ORDER BY table_name, column_name`)),
    '-- constraints',
    ...(await q(`SELECT t.relname || ' ' || con.conname || ' ' || pg_get_constraintdef(con.oid) AS line
                   FROM pg_constraint con JOIN pg_class t ON t.oid = con.conrelid JOIN pg_namespace n ON n.oid = t.relnamespace
                  WHERE n.nspname = $1 ORDER BY t.relname, con.conname`)),
    '-- storage options',
    ...(await q(`SELECT t.relname || ' ' || array_to_string(t.reloptions, ', ') AS line
                   FROM pg_class t JOIN pg_namespace n ON n.oid = t.relnamespace
                  WHERE n.nspname = $1 AND t.reloptions IS NOT NULL ORDER BY t.relname`)),
    '-- indexes',
    ...(await q(`SELECT indexdef AS line FROM pg_indexes WHERE schemaname = $1 ORDER BY tablename, indexname`)),
    '-- triggers',
    ...(await q(`SELECT pg_get_triggerdef(tg.oid) AS line
                   FROM pg_trigger tg JOIN pg_class t ON t.oid = tg.tgrelid JOIN pg_namespace n ON n.oid = t.relnamespace
                  WHERE n.nspname = $1 AND NOT tg.tgisinternal ORDER BY t.relname, tg.tgname`)),
    '-- functions',
    ...(await q(`SELECT pg_get_functiondef(p.oid) AS line
                   FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                  WHERE n.nspname = $1 ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)`)),
  ];
  // The schema's own name (and the channel named after it) vary per database: placeholders.
  return (
    parts
      .join('\n')
      .split(channelFor(schema))
      .join('leasehold_freed_SCHEMA')
      .split(`"${schema}"`)
      .join('SCHEMA')
      .split(schema)
      .join('SCHEMA')
      .replace(/[ \t]+$/gm, '') + '\n'
  );
}

function sqliteDump(path: string): string {
  const Database = loadSqliteDriver();
  const db = new Database(path, { readonly: true });
  try {
    const rows = db.prepare(`SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name`).all() as Array<{
      type: string;
      name: string;
      sql: string | null;
    }>;
    return rows.map((r) => `-- ${r.type} ${r.name}\n${(r.sql ?? '').replace(/[ \t]+$/gm, '')};`).join('\n') + '\n';
  } finally {
    db.close();
  }
}

if (selectedStores().includes('postgres')) {
  void describe('PostgreSQL schema', () => {
    const c = new pg.Client({ connectionString: TEST_PG_URL });
    const schemas: string[] = [];
    const fresh = (): string => {
      const s = `lh_dump_${randomBytes(4).toString('hex')}`;
      schemas.push(s);
      return s;
    };
    before(async () => {
      await c.connect();
    });
    after(async () => {
      for (const s of schemas) await c.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
      await c.end();
    });

    async function migrateStore(schema: string): Promise<void> {
      const store = await PostgresStore.create({ url: TEST_PG_URL, schema });
      try {
        const r = await store.migrate();
        assert.deepEqual(r, { current: SCHEMA_VERSION, expected: SCHEMA_VERSION });
      } finally {
        await store.close();
      }
    }

    void it('an empty schema migrated is src/backends/postgres/schema.sql', async (t) => {
      const s = fresh();
      await migrateStore(s);
      // pg_get_functiondef's layout is the server's: the file is dumped from one major version.
      const major = (await c.query<{ v: string }>(`SELECT current_setting('server_version_num') AS v`)).rows[0]!.v.slice(0, -4);
      const header = `-- PostgreSQL ${major}\n`;
      const file = readFileSync(join(repo, 'src/backends/postgres/schema.sql'), 'utf8');
      if (!WRITE && !file.startsWith(header)) {
        t.skip(`schema.sql was dumped from ${file.split('\n')[0]!.slice(3)}, this server is PostgreSQL ${major}: the upgrade test below still runs`);
        return;
      }
      matchesFile('src/backends/postgres/schema.sql', header + (await pgDump(c, s)));
    });

    void it('a schema created by every earlier version upgrades to the same schema', async () => {
      const target = fresh();
      await migrateStore(target);
      const want = await pgDump(c, target);
      for (let v = 1; v < SCHEMA_VERSION; v++) {
        // What leasehold at schema version v left: its first v migrations, and the version row.
        const s = fresh();
        const all = migrations(s);
        await c.query('BEGIN');
        await c.query(`CREATE SCHEMA "${s}"`);
        await c.query(`CREATE TABLE "${s}".schema_version (version integer NOT NULL)`);
        for (const m of all.slice(0, v)) await c.query(m);
        await c.query(`INSERT INTO "${s}".schema_version (version) VALUES ($1)`, [v]);
        await c.query('COMMIT');
        await migrateStore(s);
        assert.equal(await pgDump(c, s), want, `a schema at version ${v}, upgraded, differs from a fresh one`);
      }
    });
  });
}

if (selectedStores().includes('sqlite')) {
  void describe('SQLite schema', () => {
    const dir = mkdtempSync(join(tmpdir(), 'lh-sqlite-dump-'));
    after(() => rmSync(dir, { recursive: true, force: true }));

    async function migrateFile(path: string): Promise<void> {
      const store = await SqliteStore.create({ url: `sqlite:${path}` });
      try {
        assert.deepEqual(await store.migrate(), { current: SQLITE_SCHEMA_VERSION, expected: SQLITE_SCHEMA_VERSION });
      } finally {
        await store.close();
      }
    }

    void it('an empty file migrated is src/backends/sqlite/schema.sql', async () => {
      const path = join(dir, 'fresh.db');
      await migrateFile(path);
      matchesFile('src/backends/sqlite/schema.sql', sqliteDump(path));
    });

    void it('a file created by every earlier version upgrades to the same schema', async () => {
      const fresh = join(dir, 'target.db');
      await migrateFile(fresh);
      const want = sqliteDump(fresh);
      const Database = loadSqliteDriver();
      for (let v = 1; v < SQLITE_SCHEMA_VERSION; v++) {
        const path = join(dir, `v${v}.db`);
        const db = new Database(path);
        db.exec('CREATE TABLE leasehold_schema_version (version INTEGER NOT NULL)');
        for (const m of SQLITE_MIGRATIONS.slice(0, v)) db.exec(m);
        db.prepare('INSERT INTO leasehold_schema_version (version) VALUES (?)').run(v);
        db.close();
        await migrateFile(path);
        assert.equal(sqliteDump(path), want, `a file at version ${v}, upgraded, differs from a fresh one`);
      }
    });
  });
}
