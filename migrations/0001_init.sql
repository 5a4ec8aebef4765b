-- Users, web sessions and API tokens: who may reach which sandbox.
CREATE TABLE users (
    id         text PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The web client's session table (better-auth layout, reduced to what the
-- manager reads). The cookie better-auth.session_token carries token.
CREATE TABLE session (
    token      text PRIMARY KEY,
    user_id    text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- API tokens are stored as sha256 hashes only.
CREATE TABLE api_tokens (
    token_hash   bytea PRIMARY KEY,
    user_id      text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz
);

-- One row per user sandbox. The subnet stays with the user until a reset.
CREATE TABLE sandboxes (
    user_id        text PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    state          text NOT NULL CHECK (state IN ('provisioning', 'running', 'paused', 'stopped', 'removed', 'failed')),
    subnet         cidr NOT NULL UNIQUE,
    container_id   text NOT NULL DEFAULT '',
    network_id     text NOT NULL DEFAULT '',
    endpoint       text NOT NULL DEFAULT '',
    token_hash     bytea,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    last_active_at timestamptz NOT NULL DEFAULT now(),
    wake_at        timestamptz
);
CREATE INDEX sandboxes_wake_at ON sandboxes (wake_at) WHERE wake_at IS NOT NULL;

-- One row per lifecycle change, for operators.
CREATE TABLE audit_events (
    id      bigserial PRIMARY KEY,
    at      timestamptz NOT NULL DEFAULT now(),
    user_id text NOT NULL,
    kind    text NOT NULL,
    detail  jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_events_user ON audit_events (user_id, at);
