-- Agent storage on Postgres (AFFIDO_AGENT_STORAGE=postgres): each user's
-- agents keep their conversations, tasks and checkpoints in a database of
-- their own, reached by a role of their own (manager/agentdb).
--
-- role is also the database's name: "agent_" and 16 random hex digits, so
-- the cluster's role and database lists (which every role can read) name
-- no user. password is the role's, kept as given: the manager hands it to
-- the user's agent over the gateway, and a copy of this database holds it,
-- as it holds connector secrets.
CREATE TABLE agent_storage (
    user_id    text PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    role       text NOT NULL UNIQUE CHECK (role ~ '^agent_[0-9a-f]{16}$'),
    password   text NOT NULL CHECK (password ~ '^[0-9a-f]{64}$'),
    created_at timestamptz NOT NULL DEFAULT now()
);
