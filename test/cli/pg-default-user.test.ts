/**
 * A PostgreSQL URL with no user name connects as the operating system's user, as psql does,
 * even where $USER is unset (containers): pg alone took its default from $USER and failed with
 * "no PostgreSQL user name specified".
 */
import assert from 'node:assert/strict';
import { userInfo } from 'node:os';
import { after, describe, it } from 'node:test';
import pg from 'pg';
import { PG_URL, Sandbox, dropSchema, freshSchema, start } from './helpers.js';

const wanted = (process.env['LEASEHOLD_TEST_STORES'] ?? 'postgres').split(',').includes('postgres');

async function roleExists(name: string): Promise<boolean> {
  const c = new pg.Client({ connectionString: PG_URL });
  await c.connect();
  try {
    return (await c.query('SELECT 1 FROM pg_roles WHERE rolname = $1 AND rolcanlogin', [name])).rowCount === 1;
  } finally {
    await c.end();
  }
}

async function schemaOwner(schema: string): Promise<string | undefined> {
  const c = new pg.Client({ connectionString: PG_URL });
  await c.connect();
  try {
    const r = await c.query<{ owner: string }>('SELECT pg_get_userbyid(nspowner) AS owner FROM pg_namespace WHERE nspname = $1', [schema]);
    return r.rows[0]?.owner;
  } finally {
    await c.end();
  }
}

void describe('PostgreSQL URL without a user name', { skip: wanted ? false : 'postgres not selected' }, () => {
  const schema = freshSchema();
  after(() => dropSchema(schema));

  void it('connects as the OS user when $USER and $PGUSER are unset', async (t) => {
    const osUser = userInfo().username;
    if (!(await roleExists(osUser))) {
      t.diagnostic(`skipped: no login role "${osUser}" on the test server to connect as`);
      t.skip(`no login role "${osUser}"`);
      return;
    }
    const sb = new Sandbox('pguser');
    for (const k of ['USER', 'PGUSER', 'LOGNAME', 'USERNAME']) delete sb.env[k];
    const u = new URL(PG_URL);
    u.username = '';
    u.password = '';
    u.searchParams.set('schema', schema);
    const r = await start(['migrate', '--store', u.toString()], sb.env).done;
    assert.equal(r.code, 0, `migrate failed: ${r.stderr}`);
    assert.doesNotMatch(r.stderr, /no PostgreSQL user name/);
    assert.equal(await schemaOwner(schema), osUser, 'the schema was created by the OS user');
  });
});
