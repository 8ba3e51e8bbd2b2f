import { errorMessage } from '../src/core/errors.js';
import { redactUrl } from '../src/backends/url.js';
import { makeTestStore, type StoreKind } from '../test/helpers/stores.js';

/** The environment variable that names each store's URL (as the tests read them). */
const URL_ENV: Record<StoreKind, string | undefined> = {
  postgres: 'LEASEHOLD_TEST_PG_URL',
  sqlite: undefined,
  redis: 'LEASEHOLD_TEST_REDIS_URL',
  etcd: 'LEASEHOLD_TEST_ETCD_URL',
  mysql: 'LEASEHOLD_TEST_MYSQL_URL',
};

/** A store that does not answer this long is as good as missing for a benchmark (a refused port fails at once). */
const CHECK_MS = 15_000;

/**
 * Before the first figure: starts etcd the way `npm test` does when it is selected and no
 * LEASEHOLD_TEST_ETCD_URL is set, then opens, migrates and drops a scratch namespace on every
 * selected store. Minutes of figures must not run only to die on the last store, and a
 * newcomer gets one line naming what is missing, not a driver's stack.
 * @returns a stop function for what it started, or a one-line reason the bench cannot run.
 */
export async function preflight(stores: readonly StoreKind[]): Promise<{ ok: true; stop: () => Promise<void> } | { ok: false; why: string }> {
  let stop = (): Promise<void> => Promise.resolve();
  if (stores.includes('etcd') && process.env['LEASEHOLD_TEST_ETCD_URL'] === undefined) {
    // scripts/ is plain JS outside the compiled tree: dist/bench/ -> the repository root.
    const script = new URL('../../scripts/services/etcd.mjs', import.meta.url).href;
    try {
      const { ensureEtcd } = (await import(script)) as { ensureEtcd: (o: { log: (m: string) => void }) => Promise<{ url: string; started: boolean; stop: () => Promise<void> }> };
      const etcd = await ensureEtcd({ log: () => {} });
      if (etcd.started) process.stdout.write(`etcd at ${etcd.url} (started for this run)\n`);
      stop = etcd.stop;
    } catch (err) {
      return {
        ok: false,
        why: `etcd is not running on 127.0.0.1:2379 and could not be started (${errorMessage(err)}); start one, set LEASEHOLD_TEST_ETCD_URL, or leave it out with --stores ${stores.filter((s) => s !== 'etcd').join(',')}`,
      };
    }
  }
  for (const kind of stores) {
    let timer: NodeJS.Timeout | undefined;
    try {
      const check = (async () => {
        const s = await makeTestStore(kind);
        await s.cleanup();
      })();
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer in ${CHECK_MS / 1000}s`)), CHECK_MS);
      });
      await Promise.race([check, timeout]);
    } catch (err) {
      await stop();
      const env = URL_ENV[kind];
      const at = env === undefined ? '' : ` at ${redactUrl(process.env[env] ?? '(the default URL)')}`;
      const rest = stores.filter((s) => s !== kind);
      return {
        ok: false,
        why:
          `the ${kind} store${at} is not usable: ${errorMessage(err).split('\n')[0]}; ` +
          `start it${env === undefined ? '' : `, set ${env}`}${rest.length > 0 ? `, or leave it out with --stores ${rest.join(',')}` : ''}`,
      };
    } finally {
      clearTimeout(timer);
    }
  }
  return { ok: true, stop };
}
