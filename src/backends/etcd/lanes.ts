/**
 * A store's lanes for the transactions of a batch release (release.ts): at most `width` of
 * them with etcd at once, the rest waiting here, in the order they were asked for.
 *
 * Why: etcd applies writes one after another, so chunks sent all at once queue inside etcd,
 * where the last of them waits for every other; with 162 chunks (closing 10,000 leases) that
 * wait outgrew any call deadline and the close failed whole. Waiting here instead costs no
 * deadline: a chunk's deadline starts when it gets a lane.
 */
export class Lanes {
  private busy = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(private readonly width: number) {}

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.busy >= this.width) await new Promise<void>((resolve) => this.waiting.push(resolve));
    else this.busy++;
    try {
      return await fn();
    } finally {
      // The lane passes straight to the next waiter (busy unchanged), or is freed.
      const next = this.waiting.shift();
      if (next !== undefined) next();
      else this.busy--;
    }
  }
}
