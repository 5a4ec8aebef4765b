-- Connectors: remote MCP servers an owner adds to one of their agents.
--
-- The manager alone reads this table: the URL and the header secret never
-- reach a sandbox, and the owner's API shows only that a secret is set.
-- The secret is kept as given (the manager must send it), so a copy of the
-- database holds it, as it holds the VAPID private key.
--
-- tools is the server's tool list as last listed, each with the owner's
-- mode (off, ask, allow) and the SHA-256 of the definition the mode was set
-- on (manager/connectors): a JSON array the manager rewrites under a row
-- lock, so a listing and an owner's change never overwrite each other.
CREATE TABLE connectors (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id     text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    agent       text NOT NULL CHECK (agent ~ '^[a-z][a-z0-9-]{0,31}$'),
    name        text NOT NULL CHECK (name ~ '^[a-z][a-z0-9-]{0,31}$'),
    url         text NOT NULL CHECK (octet_length(url) BETWEEN 1 AND 2048),
    header_name text NOT NULL DEFAULT '',
    secret      text NOT NULL DEFAULT '' CHECK (octet_length(secret) <= 4096),
    tools       jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(tools) = 'array'),
    created_at  timestamptz NOT NULL DEFAULT now(),
    listed_at   timestamptz,
    UNIQUE (user_id, agent, name)
);
