/** Where the job manager and runner log: the server's logger (pino), or nothing in tests. */
export interface JobLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}
