/**
 * The start-up floor of a CLI on one store: a process that loads the store's driver, opens a
 * connection, makes one read and closes it, with nothing of leasehold. `leasehold run -- true`
 * does that and more (a schema check, a claim, the command, a release), so the ratio to this
 * says what leasehold itself adds; the ratio to `node -e 0` includes the driver's own cost.
 *
 *   node dist/bench/driver-floor.js postgres|sqlite|redis|etcd|mysql STORE_URL
 */
const [kind, url] = process.argv.slice(2);
if (kind === undefined || url === undefined) {
  process.stderr.write('usage: driver-floor.js postgres|sqlite|redis|etcd|mysql STORE_URL\n');
  process.exit(2);
}
// The store URLs carry leasehold's own parameters (?schema=, ?prefix=): the drivers get none.
const bare = url.replace(/\?.*$/, '');

switch (kind) {
  case 'postgres': {
    const { default: pg } = await import('pg');
    const client = new pg.Client({ connectionString: bare });
    await client.connect();
    await client.query('SELECT 1');
    await client.end();
    break;
  }
  case 'sqlite': {
    const { default: Database } = await import('better-sqlite3');
    const db = new Database(bare.replace(/^sqlite:/, ''));
    db.prepare('SELECT 1').get();
    db.close();
    break;
  }
  case 'redis': {
    const { Redis } = await import('ioredis');
    const client = new Redis(bare, { lazyConnect: true });
    await client.connect();
    await client.get('leasehold-bench-floor');
    await client.quit();
    break;
  }
  case 'etcd': {
    const { Etcd3 } = await import('etcd3');
    const client = new Etcd3({ hosts: bare.replace(/^etcds?:\/\//, 'http://').split(',').map((h, i) => (i === 0 ? h : `http://${h}`)) });
    await client.get('leasehold-bench-floor').string();
    client.close();
    break;
  }
  case 'mysql': {
    const { createConnection } = await import('mysql2/promise');
    const c = await createConnection(bare.replace(/^mariadb:/, 'mysql:'));
    await c.query('SELECT 1');
    await c.end();
    break;
  }
  default:
    process.stderr.write(`driver-floor.js: unknown store kind ${JSON.stringify(kind)}\n`);
    process.exit(2);
}
// As bin/leasehold.js does: a driver may keep a timer after close; the floor ends when the work does.
process.exit(0);
