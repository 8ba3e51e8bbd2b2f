/** The subset of a pino logger leasehold calls. Default: silent. */
export interface LoggerLike {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

const noop = (): void => {};
export const silentLogger: LoggerLike = { debug: noop, info: noop, warn: noop, error: noop };
