/**
 * Job records in Redis (cluster mode): every replica reads and writes the same records, and hears
 * each change as it is made, so any replica answers for any job.
 *
 * - One hash, `<prefix>:records`, maps a job id to its record (the JSON a single node keeps in
 *   job.json). Each write publishes the record on `<prefix>:changes`, in the order Redis applied
 *   the writes, and every replica's book takes it (JobBook.adopt).
 * - Writes are guarded in Redis itself (one Lua script, atomic): a finished job (succeeded,
 *   failed, cancelled) is never written again; a run's writes are taken only while the stored
 *   record is of that run (the same attempt); a run claims a job by writing `running` with the
 *   next attempt; a cancel is taken whenever the job has not finished; a record is created only
 *   queued — or, where Redis lost it (restarted without persistence), as it was (a removed job
 *   leaves a marker for a day, so that a run of it is not brought back). A refused write rejects
 *   with RecordConflict holding the record that won.
 * - The job's files (its upload, run directories, result, report) stay in the data directory,
 *   a volume every replica mounts.
 */
import type { Redis } from 'ioredis';
import { RecordConflict, type RecordWriter } from './records.js';
import { RECORD_FORMAT, type Artifacts, type JobRecord } from './store.js';

/** A record's change as published: the replica that wrote it, and the record (null: removed). */
export interface RecordChange {
  readonly id: string;
  readonly from: string;
  readonly record: JobRecord | null;
}

// KEYS[1] the hash of records, KEYS[2] the channel, KEYS[3] the job's removal marker; ARGV: id,
// record JSON, replica. Returns {1} when written, {0, current or false} when refused.
const GUARDED_WRITE = `
local current = redis.call('HGET', KEYS[1], ARGV[1])
local new = cjson.decode(ARGV[2])
local function run_of(job)
  local runs = job.runs
  if type(runs) ~= 'table' or #runs == 0 then return '' end
  return tostring(runs[#runs].replica)
end
if not current then
  local created = new.job.state == 'queued' and new.job.attempts == 0
  if not created and redis.call('EXISTS', KEYS[3]) == 1 then return {0, false} end
else
  local stored = cjson.decode(current).job
  local state = stored.state
  if state == 'succeeded' or state == 'failed' or state == 'cancelled' then return {0, current} end
  local same_run = new.job.attempts == stored.attempts and run_of(new.job) == run_of(stored)
  local claim = new.job.state == 'running' and new.job.attempts == stored.attempts + 1
  if new.job.state ~= 'cancelled' and not same_run and not claim then return {0, current} end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PUBLISH', KEYS[2], cjson.encode({id = ARGV[1], from = ARGV[3], record = ARGV[2]}))
return {1}
`;

// KEYS[1] the hash, KEYS[2] the channel, KEYS[3] the removal marker; ARGV: id, replica.
const REMOVE = `
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('SET', KEYS[3], '1', 'EX', 86400)
redis.call('PUBLISH', KEYS[2], cjson.encode({id = ARGV[1], from = ARGV[2], record = false}))
return 1
`;

export class ClusterRecords implements RecordWriter {
  private readonly hash: string;
  private readonly channel: string;

  /**
   * `redis` carries commands; `subscriber` is a second connection for the change channel (a
   * subscribed Redis connection takes no other command).
   */
  constructor(
    private readonly redis: Redis,
    private readonly subscriber: Redis,
    prefix: string,
    readonly replica: string,
    private readonly files: Artifacts,
  ) {
    this.hash = `${prefix}:records`;
    this.channel = `${prefix}:changes`;
  }

  /** Every record (start-up). */
  async load(): Promise<JobRecord[]> {
    const all = await this.redis.hgetall(this.hash);
    return Object.values(all).map(parseRecord);
  }

  async read(id: string): Promise<JobRecord | null> {
    const text = await this.redis.hget(this.hash, id);
    return text === null ? null : parseRecord(text);
  }

  /** Whether the job was removed (in the last day): a record missing without it was lost by Redis. */
  async wasRemoved(id: string): Promise<boolean> {
    return (await this.redis.exists(this.removed(id))) === 1;
  }

  /** An upload being received is recorded here only once accepted (until then it is this replica's). */
  async write(record: JobRecord): Promise<void> {
    if (record.receiving !== null) return;
    const id = record.job.id;
    const answer = (await this.redis.eval(
      GUARDED_WRITE,
      3,
      this.hash,
      this.channel,
      this.removed(id),
      id,
      JSON.stringify(record),
      this.replica,
    )) as [number, string | null];
    if (answer[0] !== 1) {
      throw new RecordConflict(id, typeof answer[1] === 'string' ? parseRecord(answer[1]) : null);
    }
  }

  /** The record first (no replica shows the job from then on), then its directory. */
  async remove(id: string): Promise<void> {
    await this.redis.eval(REMOVE, 3, this.hash, this.channel, this.removed(id), id, this.replica);
    await this.files.remove(id);
  }

  /**
   * Puts back a record Redis lost (restarted without persistence) as this replica last saw it;
   * a record Redis has is left as it is. Returns whether it was put back.
   */
  async restore(record: JobRecord): Promise<boolean> {
    const id = record.job.id;
    if (await this.wasRemoved(id)) return false;
    return (await this.redis.hsetnx(this.hash, id, JSON.stringify(record))) === 1;
  }

  private removed(id: string): string {
    return `${this.hash}:removed:${id}`;
  }

  /** Calls `listener` with every change another replica makes, in the order they were made. */
  async subscribe(listener: (change: RecordChange) => void): Promise<void> {
    this.subscriber.on('message', (channel: string, message: string) => {
      if (channel !== this.channel) return;
      const change = JSON.parse(message) as { id: string; from: string; record: string | false };
      if (change.from === this.replica) return;
      listener({
        id: change.id,
        from: change.from,
        record: change.record === false ? null : parseRecord(change.record),
      });
    });
    await this.subscriber.subscribe(this.channel);
  }
}

function parseRecord(text: string): JobRecord {
  const record = JSON.parse(text) as JobRecord;
  if (record?.format !== RECORD_FORMAT) throw new Error(`a Redis job record is not ${RECORD_FORMAT}`);
  return record;
}
