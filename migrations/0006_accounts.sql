-- Accounts of the web client: a password per user (argon2id, PHC string;
-- NULL: no password sign-in), sessions the owner can list and revoke, API
-- tokens with names, and invites (sign-up is by invite unless an operator
-- turns open sign-up on).
ALTER TABLE users ADD COLUMN password_hash text;

ALTER TABLE session ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY;
ALTER TABLE session ADD COLUMN user_agent text NOT NULL DEFAULT '';
ALTER TABLE session ADD COLUMN last_seen_at timestamptz NOT NULL DEFAULT now();
CREATE UNIQUE INDEX session_by_id ON session (id);
CREATE INDEX session_by_user ON session (user_id);

ALTER TABLE api_tokens ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY;
ALTER TABLE api_tokens ADD COLUMN name text NOT NULL DEFAULT '';
CREATE UNIQUE INDEX api_tokens_by_id ON api_tokens (id);

-- An invite names the user it creates; only the code's sha256 is stored.
CREATE TABLE invites (
    code_hash  bytea PRIMARY KEY,
    user_id    text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    used_at    timestamptz
);
