-- 1: the first layout (schema.go's migration 1, in Postgres), and the
-- writer lease: one row, the process that may write (see lease.go).
CREATE TABLE durable_meta (
	singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
	next_id   BIGINT NOT NULL,
	next_seq  BIGINT NOT NULL
);
INSERT INTO durable_meta (singleton, next_id, next_seq) VALUES (1, 2, 1);
CREATE TABLE record_ids (id BIGINT PRIMARY KEY, record_type TEXT NOT NULL);
CREATE TABLE conversations (id BIGINT PRIMARY KEY, record TEXT NOT NULL CHECK (record::json IS NOT NULL));
CREATE TABLE entries (
	id              BIGINT PRIMARY KEY,
	conversation_id BIGINT NOT NULL,
	kind            TEXT NOT NULL,
	head            BIGINT,
	commit_seq      BIGINT NOT NULL,
	record          TEXT NOT NULL CHECK (record::json IS NOT NULL)
);
CREATE INDEX entries_by_conversation ON entries (conversation_id, id);
CREATE TABLE tasks (
	id              BIGINT PRIMARY KEY,
	conversation_id BIGINT NOT NULL,
	kind            TEXT NOT NULL,
	state           TEXT NOT NULL CONSTRAINT tasks_state CHECK (state IN ('pending', 'running', 'waiting', 'completing', 'terminal')),
	record          TEXT NOT NULL CHECK (record::json IS NOT NULL)
);
CREATE INDEX tasks_by_state ON tasks (state, id);
CREATE TABLE submissions (
	id              BIGINT PRIMARY KEY,
	conversation_id BIGINT NOT NULL,
	request_id      TEXT,
	status          TEXT NOT NULL CHECK (status IN ('queued', 'placed', 'done', 'unanswered')),
	record          TEXT NOT NULL CHECK (record::json IS NOT NULL)
);
CREATE UNIQUE INDEX submissions_by_request ON submissions (conversation_id, request_id) WHERE request_id IS NOT NULL;
CREATE INDEX submissions_by_status ON submissions (status, id);
CREATE TABLE usage (
	conversation_id BIGINT NOT NULL,
	kind            TEXT NOT NULL,
	name            TEXT NOT NULL,
	input_tokens    BIGINT NOT NULL DEFAULT 0,
	output_tokens   BIGINT NOT NULL DEFAULT 0,
	calls           BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (conversation_id, kind, name)
);
CREATE TABLE durable_lease (
	singleton  INTEGER PRIMARY KEY CHECK (singleton = 1),
	holder     TEXT NOT NULL,
	generation BIGINT NOT NULL,
	expires_at TIMESTAMPTZ NOT NULL
);
