import { parseArgs } from 'node:util';
import { EXIT, STORE_OPTIONS, openStoreFromFlags, out, usageError } from './common.js';

export const MIGRATE_USAGE = `Usage: leasehold migrate [--store URL] [--schema NAME]

Creates or upgrades leasehold's tables. Idempotent and safe to run from many processes at once
(PostgreSQL takes an advisory lock for it). PostgreSQL needs it once per schema before any
lease is taken; the SQLite store migrates itself on open.

  --store URL     postgres://user@host:5432/db[?schema=S] or sqlite:/path/file.db
                  (default: LEASEHOLD_STORE, else the embedded SQLite file)
  --schema NAME   PostgreSQL schema for the tables (default: ?schema= in the URL, else
                  LEASEHOLD_SCHEMA, else "leasehold")`;

export async function migrateCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args: argv, options: { ...STORE_OPTIONS, help: { type: 'boolean', short: 'h' } }, strict: true, allowPositionals: true });
  if (values.help === true) {
    out(MIGRATE_USAGE);
    return EXIT.OK;
  }
  if (positionals.length > 0) throw usageError(`migrate takes no arguments, got ${JSON.stringify(positionals[0])}; use --store URL`);
  const { store } = await openStoreFromFlags(values);
  try {
    const before = await store.schemaStatus();
    const after = await store.migrate();
    out(
      before.current === after.current
        ? `${store.description}: schema already at version ${after.current}`
        : `${store.description}: schema migrated from version ${before.current} to ${after.current}`,
    );
    return EXIT.OK;
  } finally {
    await store.close();
  }
}
