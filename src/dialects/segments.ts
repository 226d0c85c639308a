/** SQL for the segment table: DDL here; the lease and admin statements sit beside it. */
import { type Flavor, qualified, quoteIdent } from './detect.js';

export interface SegmentTableRef {
  readonly schema: string | undefined;
  readonly table: string;
}

export function segmentTableDdl(flavor: Flavor, ref: SegmentTableRef): { up: string[]; down: string[] } {
  const t = qualified(flavor, ref.schema, ref.table);
  if (flavor === 'mysql') {
    return {
      up: [
        `CREATE TABLE IF NOT EXISTS ${t} (
  tag varchar(128) NOT NULL,
  max_id bigint NOT NULL DEFAULT 0,
  step int NOT NULL DEFAULT 1000,
  description varchar(256) NOT NULL DEFAULT '',
  updated_at timestamp(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (tag),
  CONSTRAINT ${quoteIdent(flavor, ref.table + '_max_id_ck')} CHECK (max_id >= 0),
  CONSTRAINT ${quoteIdent(flavor, ref.table + '_step_ck')} CHECK (step > 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
      ],
      down: [`DROP TABLE IF EXISTS ${t}`],
    };
  }
  return {
    up: [
      `CREATE TABLE IF NOT EXISTS ${t} (
  tag varchar(128) PRIMARY KEY,
  max_id bigint NOT NULL DEFAULT 0 CHECK (max_id >= 0),
  step integer NOT NULL DEFAULT 1000 CHECK (step > 0),
  description varchar(256) NOT NULL DEFAULT '',
  updated_at timestamptz NOT NULL DEFAULT now()
)`,
    ],
    down: [`DROP TABLE IF EXISTS ${t}`],
  };
}
