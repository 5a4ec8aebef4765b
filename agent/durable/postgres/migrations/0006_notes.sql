-- 6: notes, named texts of the agent's that belong to no conversation.
CREATE TABLE notes (name TEXT PRIMARY KEY, version BIGINT NOT NULL, record TEXT NOT NULL CHECK (record::json IS NOT NULL));
