/**
 * A node-postgres client that records the text of each round trip it sends, for tests that
 * count a fenced write's round trips or read which statement it chose.
 */
import type pg from 'pg';
import type { PgQueryableLike } from '../../src/backends/postgres/store.js';

export function recording(client: pg.Client): { db: PgQueryableLike; sent: string[] } {
  const sent: string[] = [];
  const db = new Proxy(client, {
    get(target, prop) {
      if (prop === 'query') {
        return (text: string, values?: unknown[]) => {
          sent.push(text);
          return target.query(text, values);
        };
      }
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  }) as unknown as PgQueryableLike;
  return { db, sent };
}
